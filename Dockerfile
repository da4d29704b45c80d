FROM node:20-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/locker
COPY . .
RUN npm ci
EXPOSE 8080
CMD ["node", "packages/central/bin/locker-central.js", "serve"]
