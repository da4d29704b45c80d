#!/usr/bin/env node
// locker-central (the central service (API, booking, edge sync)): the build (../dist/cli.js) with plain node, or the sources through tsx (@locker/common/launch).
import { launch } from '@locker/common/launch';

await launch('locker-central', import.meta.url);
