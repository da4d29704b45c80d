FROM node:20-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/locker
COPY . .
# npm install, not npm ci: npm 11 writes a lock file npm ci refuses (see .ci/run)
RUN npm install --no-audit --no-fund && chown -R node:node /opt/locker
USER node
EXPOSE 8080
CMD ["node", "packages/central/bin/locker-central.js", "serve"]
