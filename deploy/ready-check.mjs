#!/usr/bin/env node
// The central container's HEALTHCHECK (Dockerfile) and deploy/local-layout.ts's readiness gate:
// exit 0 when GET /ready of the instance on this machine answers 200 (the database answers, the
// MQTT broker is listening or connected), else 1. Plain node, no dependencies (the image has no
// curl). The port is the instance's LOCKER_HTTP_PORT (default 8080); READY_URL overrides the URL.
const port = process.env.LOCKER_HTTP_PORT || '8080';
const url = process.env.READY_URL || `http://127.0.0.1:${port}/ready`;
try {
  const res = await fetch(url, { signal: AbortSignal.timeout(4000) });
  const body = await res.text();
  if (res.status !== 200) console.error(`not ready: ${res.status} ${body.slice(0, 200)}`);
  process.exit(res.status === 200 ? 0 : 1);
} catch (e) {
  console.error(`not ready: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}
