#!/usr/bin/env node
// locker-lockbus (the lock-bus wiring check; cli.js runs itself): the build (../dist/cli.js) with plain node, or the sources through tsx (@locker/common/launch).
import { launch } from '@locker/common/launch';

await launch('locker-lockbus', import.meta.url, { callMain: false });
