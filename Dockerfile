# The cronledger worker, as docker-compose.yml runs it (3 replicas), and the CLI (its `migrate` and `cli` services).
# TypeScript runs through tsx: no build step.
FROM node:20-bookworm-slim@sha256:2cf067cfed83d5ea958367df9f966191a942351a2df77d6f0193e162b5febfc0

WORKDIR /app
ENV NODE_ENV=production

# Dependencies first, so editing the source does not reinstall them. No install scripts are needed:
# esbuild and @swc/core get their native binaries from optional platform packages, and protobufjs's script
# only prints a version warning.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

COPY tsconfig.json ./
COPY bin ./bin
COPY src ./src
COPY migrations ./migrations
COPY prices ./prices
COPY examples ./examples

# Report artifacts go to a volume shared by the replicas; a new named volume takes this directory's owner.
RUN mkdir -p /reports && chown node:node /reports
USER node

CMD ["node", "--import", "tsx", "src/worker.ts"]
