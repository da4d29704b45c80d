#!/usr/bin/env node
// locker-agent (the terminal agent): the build (../dist/cli.js) with plain node, or the sources through tsx (@locker/common/launch).
import { launch } from '@locker/common/launch';

await launch('locker-agent', import.meta.url);
