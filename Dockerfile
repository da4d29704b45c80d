# The central service's image (docker-compose.yml, docs/deploy.md). Two stages: the first installs
# every dependency and builds (npm run build: JavaScript in packages/*/dist), then drops the dev
# dependencies; the second holds the build and the production dependencies only, and runs as a
# non-root user. The same image runs the one-shot steps of the compose file
# (`locker-central provision`, `locker-central mqtt-passwd`): ENTRYPOINT is locker-central.
FROM node:20-bookworm-slim AS build
# better-sqlite3 is a native module: compilers in case no prebuilt binary matches
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/locker
COPY . .
RUN npm ci --no-audit --no-fund \
 && npm run build \
 && npm prune --omit=dev --no-audit --no-fund

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /opt/locker
# the broker's user id of the eclipse-mosquitto image (1883): docker-compose.yml's mqtt-passwd step
# runs as this user, so the password file it writes into the shared volume belongs to the user
# Mosquitto reads it as (mode 600); the directory is that volume's mount point (a new named volume
# takes its owner and mode from the image)
RUN groupadd --system --gid 1883 mosquitto \
 && useradd --system --uid 1883 --gid 1883 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin mosquitto \
 && mkdir -p /var/lib/locker/mqtt && chown mosquitto:mosquitto /var/lib/locker/mqtt && chmod 700 /var/lib/locker/mqtt
# owned by root, read-only for the service: it runs as `node` (uid 1000), not root
COPY --from=build /opt/locker /opt/locker
USER node
EXPOSE 8080
# GET /ready: the database answers a trivial query and the MQTT broker is up (external: connected;
# embedded: listening); 503 otherwise. /health only says the process answers HTTP.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["node", "/opt/locker/deploy/ready-check.mjs"]
ENTRYPOINT ["node", "/opt/locker/packages/central/bin/locker-central.js"]
CMD ["serve"]
