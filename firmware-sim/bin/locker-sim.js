#!/usr/bin/env node
// locker-sim (the lock-board and scanner simulator; cli.js runs itself): the build (../dist/cli.js) with plain node, or the sources through tsx (@locker/common/launch).
import { launch } from '@locker/common/launch';

await launch('locker-sim', import.meta.url, { callMain: false });
