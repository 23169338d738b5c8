import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot, TEMPORAL_SERVICES, TEMPORAL_TLS_SERVER_NAME, temporalTlsEnv, type StackFile } from '../../src/config';
import { MAKE_CERTS_SCRIPT } from '../../src/dev/temporal-tls';
import { PAYLOAD_KEYS_FILE_VARIABLE } from '../../src/payload-codec';
import { SEARCH_ATTRIBUTES } from '../../src/constants';
import { TEMPORAL_CONFIG_DIR, TEMPORAL_CONFIG_ENV, temporalServerEnvironment, temporalServiceArgs } from '../../src/dev/temporal-cluster';
import { DEV_SERVER_DYNAMIC_CONFIG } from '../../src/dev/temporal-server';
import { findTemporalServerBinaries, TEMPORAL_SERVER_VERSION, TEMPORAL_UI_VERSION } from '../../src/dev/temporal-server-binaries';

/**
 * docker-compose.yml cannot be started here (no Docker engine), so it is checked against the code instead:
 * the services and versions it promises, and that the workers get exactly the settings the code reads.
 */

interface Service {
  image?: string;
  user?: string;
  read_only?: boolean;
  tmpfs?: string[];
  cap_drop?: string[];
  security_opt?: string[];
  mem_limit?: string;
  pids_limit?: number;
  restart?: string;
  healthcheck?: { test: string[] };
  profiles?: string[];
  build?: string;
  command?: string | string[];
  entrypoint?: string | string[];
  environment?: Record<string, string>;
  ports?: string[];
  volumes?: string[];
  depends_on?: Record<string, { condition: string }>;
  deploy?: { replicas?: number };
  secrets?: string[];
}

const root = repoRoot();
// merge: the four Temporal services share their settings through a `<<: *temporal-service` merge key, as compose reads it.
const compose = parse(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
  secrets: Record<string, { file: string }>;
  'x-temporal-client-tls': Record<string, string>;
};
/** Jobs that run once and exit (others wait for service_completed_successfully): no healthcheck to give. */
const ONE_SHOTS = ['temporal-certs', 'temporal-db-roles', 'temporal-schema', 'temporal-setup', 'migrate'];
/** The image whose start script renders its config file into the image, so its root file system must stay writable. */
const WRITABLE_ROOT = ['temporal-ui'];
/**
 * Images left on their version tag: no public source pins these exact tags by digest (and there is no registry access
 * here). Each carries a comment saying so in docker-compose.yml.
 */
const UNPINNED = ['temporalio/server:1.29.1', 'temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0', 'alpine/openssl:3.3.2'];
const BUILT = 'cronledger-worker'; // this repository's Dockerfile, whose base image is pinned
const { services } = compose;
const worker = services.worker;
const script = (s: Service) => [s.entrypoint, s.command].flat().join('\n');

/** Variables read through a constant or a library: the payload keys file, and the TLS settings @temporalio/envconfig reads. */
const READ_THROUGH_NAMES = [PAYLOAD_KEYS_FILE_VARIABLE, ...Object.keys(temporalTlsEnv({ dir: '/tls', serverName: 'x' }))];
/** Where the `temporal-tls` volume (deploy/temporal/make-certs.sh's files) is mounted in every service that uses it. */
const TLS_DIR = '/etc/cronledger/tls';
const TLS_MOUNT = `temporal-tls:${TLS_DIR}`;

/**
 * Every environment variable the source reads, as `env.NAME`, `process.env.NAME` or `env['NAME']`, and each secret
 * setting read with `secretSetting('NAME')` (or `requiredSecret('NAME')`), as NAME and NAME_FILE.
 */
function envVarsReadBySource(): Set<string> {
  const names = new Set<string>(READ_THROUGH_NAMES);
  const files = readdirSync(join(root, 'src'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
  for (const file of files) {
    const text = readFileSync(join(root, 'src', file), 'utf8');
    for (const m of text.matchAll(/\benv(?:\.([A-Z][A-Z0-9_]*)\b|\[['"]([A-Z][A-Z0-9_]*)['"]\])/g)) names.add(m[1] ?? m[2]);
    for (const m of text.matchAll(/\b(?:secretSetting|requiredSecret)\('([A-Z][A-Z0-9_]*)'/g)) names.add(m[1]).add(`${m[1]}_FILE`);
  }
  return names;
}

/** What scripts/compose-secrets.sh writes, run into a fresh folder: file name to content. */
function generatedSecrets(): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-compose-secrets-'));
  try {
    execFileSync(join(root, 'scripts', 'compose-secrets.sh'), [join(dir, 'secrets')], { encoding: 'utf8' });
    const names = readdirSync(join(dir, 'secrets'));
    return Object.fromEntries(names.map((name) => [name, readFileSync(join(dir, 'secrets', name), 'utf8')]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('docker-compose.yml', () => {
  it('has Temporal on PostgreSQL, its schema and setup jobs, the Web UI, a separate ledger PostgreSQL and the workers', () => {
    expect(Object.keys(services).sort()).toEqual(
      [
        'admin',
        'cli',
        'ledger-postgres',
        'migrate',
        'temporal-db-roles',
        'temporal-frontend',
        'temporal-history',
        'temporal-matching',
        'temporal-worker',
        'temporal-postgresql',
        'temporal-schema',
        'temporal-setup',
        'temporal-certs',
        'temporal-ui',
        'prometheus',
        'worker',
      ].sort(),
    );
    for (const service of TEMPORAL_SERVICES) {
      const s = services[`temporal-${service}`];
      expect(s.environment).toMatchObject({ POSTGRES_SEEDS: 'temporal-postgresql', TEMPORAL_DB: 'temporal' });
      expect(s.depends_on).toEqual({
        'temporal-schema': { condition: 'service_completed_successfully' },
        'temporal-certs': { condition: 'service_completed_successfully' },
      });
    }
    expect(script(services['temporal-schema'])).toContain('--ep temporal-postgresql');
  });

  it('pins every image, at the versions `dev up` runs (the server and UI that --temporal server builds, also in the CLI v1.5.1)', () => {
    const server = `temporalio/server:${TEMPORAL_SERVER_VERSION.slice(1)}`;
    const tag = (image: string) => image.replace(/@sha256:[0-9a-f]{64}$/, '');
    const images = Object.fromEntries(Object.entries(services).flatMap(([name, s]) => (s.image ? [[name, tag(s.image)]] : [])));
    expect(images).toEqual({
      'temporal-postgresql': 'postgres:16.14',
      'temporal-db-roles': 'postgres:16.14',
      'temporal-certs': 'alpine/openssl:3.3.2',
      'temporal-schema': `temporalio/admin-tools:${TEMPORAL_SERVER_VERSION.slice(1)}-tctl-1.18.4-cli-1.5.0`,
      'temporal-history': server,
      'temporal-matching': server,
      'temporal-frontend': server,
      'temporal-worker': server,
      'temporal-setup': `temporalio/admin-tools:${TEMPORAL_SERVER_VERSION.slice(1)}-tctl-1.18.4-cli-1.5.0`,
      'temporal-ui': `temporalio/ui:${TEMPORAL_UI_VERSION.slice(1)}`,
      'ledger-postgres': 'postgres:16.14',
      migrate: BUILT,
      worker: BUILT,
      cli: BUILT,
      admin: BUILT,
      prometheus: 'prom/prometheus:v2.55.1',
    });
  });

  it('pins every image by digest (name:tag@sha256:...), but the Temporal ones no digest could be verified for, which say so', () => {
    const text = readFileSync(join(root, 'docker-compose.yml'), 'utf8');
    const unpinned = [...new Set(Object.values(services).flatMap((s) => (s.image ? [s.image] : [])))]
      .filter((image) => image !== BUILT && !/^[^@\s]+:[^@\s]+@sha256:[0-9a-f]{64}$/.test(image))
      .sort();
    expect(unpinned).toEqual([...UNPINNED].sort());
    for (const image of UNPINNED) {
      const lines = text.split('\n').filter((l) => l.includes(`image: ${image}`));
      expect(lines.length).toBeGreaterThan(0);
      for (const line of lines) expect(line, `${image} says why it is on its tag`).toMatch(/# not pinned: no (verified )?digest/);
    }
    const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^FROM node:20-bookworm-slim@sha256:[0-9a-f]{64}$/m);
  });

  it('runs every container without capabilities, without new privileges, with memory and pid limits', () => {
    for (const [name, s] of Object.entries(services)) {
      expect([name, s.cap_drop]).toEqual([name, ['ALL']]);
      expect([name, s.security_opt]).toEqual([name, ['no-new-privileges:true']]);
      expect([name, s.mem_limit]).toEqual([name, expect.stringMatching(/^\d+[mg]$/)]);
      expect([name, s.pids_limit]).toEqual([name, expect.any(Number)]);
      expect(s).not.toHaveProperty('privileged');
      expect(s).not.toHaveProperty('cap_add');
    }
  });

  it('runs every container on a read-only root file system, with a tmpfs for scratch, but the Web UI', () => {
    for (const [name, s] of Object.entries(services)) {
      const readOnly = !WRITABLE_ROOT.includes(name);
      expect([name, s.read_only]).toEqual([name, readOnly]);
      if (readOnly) expect([name, s.tmpfs]).toEqual([name, expect.arrayContaining(['/tmp'])]);
    }
    for (const db of ['temporal-postgresql', 'ledger-postgres']) {
      expect(services[db].user).toBe('postgres'); // no root at start, so nothing needs a capability to drop it
      expect(services[db].tmpfs).toContain('/var/run/postgresql');
    }
  });

  it('gives every long-running service a healthcheck (workers and the admin page too); the one-shot jobs exit instead', () => {
    for (const [name, s] of Object.entries(services)) {
      if (ONE_SHOTS.includes(name) || name === 'cli') continue;
      expect([name, s.healthcheck?.test?.[0]]).toEqual([name, expect.stringMatching(/^CMD(-SHELL)?$/)]);
    }
    for (const name of ONE_SHOTS) expect([name, services[name].restart]).toEqual([name, 'no']);
    const waitedFor = Object.values(services).flatMap((s) =>
      Object.entries(s.depends_on ?? {}).flatMap(([dep, c]) => (c.condition === 'service_completed_successfully' ? [dep] : [])),
    );
    expect([...new Set(waitedFor)].sort()).toEqual([...ONE_SHOTS].sort());
    expect(worker.healthcheck?.test.join(' ')).toContain('http://127.0.0.1:9464/metrics');
    expect(services.admin.healthcheck?.test.join(' ')).toContain('http://127.0.0.1:8234/assets/admin.css');
  });

  it('publishes only what a person opens, the Web UI and the admin page, on 127.0.0.1; Temporal, Prometheus, metrics and databases stay inside', () => {
    const published = Object.fromEntries(Object.entries(services).flatMap(([name, s]) => (s.ports ? [[name, s.ports]] : [])));
    expect(published).toEqual({
      'temporal-ui': ['127.0.0.1:8233:8080'],
      admin: ['127.0.0.1:8234:8234'],
    });
    for (const s of Object.values(services)) expect(s).not.toHaveProperty('network_mode');
    expect(services['temporal-ui'].environment?.TEMPORAL_ADDRESS).toBe('temporal-frontend:7233');
  });

  it('keeps every secret in a file: no password, token, key or URL with credentials in any environment', () => {
    for (const [name, s] of Object.entries(services)) {
      for (const [key, value] of Object.entries(s.environment ?? {})) {
        expect([name, key]).not.toEqual([
          name,
          expect.stringMatching(/PASSWORD$|PWD$|TOKEN$|SECRET$|API_KEY$|KEYS$|^DATABASE_URL$|^DATABASE_\w*_URL$|DATABASE_URL$/),
        ]);
        expect([name, key, value]).not.toEqual([name, key, expect.stringMatching(/:\/\/[^/@\s]+:[^/@\s]+@/)]);
      }
    }
    for (const ignore of ['.gitignore', '.dockerignore']) expect(readFileSync(join(root, ignore), 'utf8').split('\n')).toContain('.env');
  });

  it('mounts each secret under /run/secrets and names it with a *_FILE variable the code reads; the secrets script writes each one', () => {
    const read = envVarsReadBySource();
    const generated = generatedSecrets();
    expect(Object.keys(generated).sort()).toEqual(Object.keys(compose.secrets).sort());
    for (const [secret, { file }] of Object.entries(compose.secrets)) expect(file).toBe(`./secrets/${secret}`);
    expect(readFileSync(join(root, '.gitignore'), 'utf8').split('\n')).toContain('secrets/');
    expect(readFileSync(join(root, '.dockerignore'), 'utf8').split('\n')).toContain('secrets');
    for (const [name, s] of Object.entries(services)) {
      const mounted = s.secrets ?? [];
      // Prometheus names its file in its own config (credentials_file), the others in their environment or script
      const config = name === 'prometheus' ? readFileSync(join(root, 'prometheus', 'prometheus.yml'), 'utf8') : '';
      const used = [script(s), ...Object.values(s.environment ?? {}), config].join('\n');
      for (const secret of mounted) expect([name, secret, used.includes(`/run/secrets/${secret}`)]).toEqual([name, secret, true]);
      for (const [key, value] of Object.entries(s.environment ?? {}).filter(([k]) => k.endsWith('_FILE'))) {
        const secret = /^\/run\/secrets\/(\w+)$/.exec(value)?.[1];
        expect([name, key, secret !== undefined && mounted.includes(secret)]).toEqual([name, key, true]);
        if (!key.startsWith('POSTGRES_')) expect([name, key, read.has(key)]).toEqual([name, key, true]); // the postgres image reads its own
      }
    }
    // The URLs the script builds name the right role, host and database for each service.
    const urlOf = (secret: string) => new URL(generated[secret].trim());
    const role = (secret: string) => [urlOf(secret).username, urlOf(secret).hostname, urlOf(secret).port, urlOf(secret).pathname];
    expect(role('ledger_worker_url')).toEqual(['cronledger_worker', 'ledger-postgres', '5432', '/cronledger']);
    expect(role('ledger_operator_url')).toEqual(['cronledger_operator', 'ledger-postgres', '5432', '/cronledger']);
    expect(role('ledger_owner_url')).toEqual(['cronledger_owner', 'ledger-postgres', '5432', '/cronledger']);
    expect(role('ledger_readonly_url')).toEqual(['cronledger_readonly', 'ledger-postgres', '5432', '/cronledger']);
    expect(role('ledger_superuser_url')).toEqual(['postgres', 'ledger-postgres', '5432', '/postgres']);
    expect(urlOf('ledger_worker_url').password).toBe(generated.cronledger_worker_password.trim());
    expect(urlOf('ledger_operator_url').password).toBe(generated.cronledger_operator_password.trim());
    expect(generated.admin_token.trim()).toMatch(/^[0-9a-f]{64}$/);
  });

  it('runs Temporal on a role that owns its databases and is no superuser; only a one-shot uses the superuser', () => {
    const pg = services['temporal-postgresql'];
    expect(pg.environment).toMatchObject({ POSTGRES_USER: 'postgres', POSTGRES_PASSWORD_FILE: '/run/secrets/temporal_postgres_password' });
    for (const service of TEMPORAL_SERVICES) {
      const s = services[`temporal-${service}`];
      expect(s.environment?.POSTGRES_USER).toBe('temporal');
      expect(s.secrets).toEqual(['temporal_db_password']); // not the superuser's
    }
    const roles = script(services['temporal-db-roles']);
    expect(roles).toContain(
      "alter role temporal with login nosuperuser nocreatedb nocreaterole noreplication nobypassrls password :'password'",
    );
    for (const db of ['temporal', 'temporal_visibility']) expect(roles).toContain(`create database ${db} owner temporal`);
    const schema = script(services['temporal-schema']);
    expect(schema).toContain('-u temporal');
    expect(schema).not.toMatch(/temporal-sql-tool[^\n]* create\b/); // the databases exist already, owned by temporal
    expect(services['temporal-schema'].depends_on).toEqual({ 'temporal-db-roles': { condition: 'service_completed_successfully' } });
    expect(services['temporal-schema'].secrets).toEqual(['temporal_db_password']);
  });

  it('creates the ledger roles and migrates as the owner in a one-shot; workers connect as the worker role, only the CLI gets the operator role', () => {
    const migrate = services.migrate;
    expect(script(migrate)).toContain('node bin/cronledger.js db roles && node bin/cronledger.js db migrate');
    expect(migrate.environment).toMatchObject({
      DATABASE_SUPERUSER_URL_FILE: '/run/secrets/ledger_superuser_url',
      DATABASE_OWNER_URL_FILE: '/run/secrets/ledger_owner_url',
      CRONLEDGER_WORKER_PASSWORD_FILE: '/run/secrets/cronledger_worker_password',
      CRONLEDGER_OPERATOR_PASSWORD_FILE: '/run/secrets/cronledger_operator_password',
      CRONLEDGER_READONLY_PASSWORD_FILE: '/run/secrets/cronledger_readonly_password', // so the admin page's role gets its password
    });
    expect(migrate.depends_on).toEqual({ 'ledger-postgres': { condition: 'service_healthy' } });
    for (const name of ['worker', 'cli']) {
      expect([name, services[name].environment?.DATABASE_URL_FILE]).toEqual([name, '/run/secrets/ledger_worker_url']);
      expect(services[name].secrets).not.toContain('ledger_owner_url');
      expect(services[name].depends_on?.migrate).toEqual({ condition: 'service_completed_successfully' });
    }
    expect(services.cli.environment?.DATABASE_OPERATOR_URL_FILE).toBe('/run/secrets/ledger_operator_url');
    for (const [name, s] of Object.entries(services)) {
      if (name !== 'cli') expect([name, s.secrets ?? []]).not.toEqual([name, expect.arrayContaining(['ledger_operator_url'])]);
    }
  });

  it('runs the CLI inside the network on demand (`docker compose run --rm cli ...`), never on `up`', () => {
    expect(services.cli.profiles).toEqual(['cli']);
    expect(services.cli.entrypoint).toEqual(['node', 'bin/cronledger.js']);
    expect(services.cli.environment?.TEMPORAL_ADDRESS).toBe('temporal-frontend:7233');
    const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
    for (const dir of ['bin', 'src', 'migrations', 'prices', 'examples']) expect(dockerfile).toContain(`COPY ${dir} ./${dir}`);
  });

  it('registers the search attributes the code sets, as Keyword, in the default namespace', () => {
    const setup = script(services['temporal-setup']);
    const line = setup.split('\n').find((l) => l.includes('search-attribute create'));
    expect(line).toBeDefined();
    for (const name of Object.values(SEARCH_ATTRIBUTES)) expect(line).toContain(`--name ${name}`);
    expect(line).toContain('--type Keyword');
    expect(line).toContain('-n default');
    expect(setup).toMatch(/namespace create -n default/);
  });

  it('runs three worker replicas of this repo, started only once Temporal is set up and the ledger migrated', () => {
    expect(worker.build).toBe('.');
    expect(worker.deploy?.replicas).toBe(3);
    expect(worker.command).toEqual(['node', '--import', 'tsx', 'src/worker.ts']);
    expect(worker.depends_on).toEqual({
      'temporal-setup': { condition: 'service_completed_successfully' },
      migrate: { condition: 'service_completed_successfully' },
    });
    const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
    expect(dockerfile).toContain('CMD ["node", "--import", "tsx", "src/worker.ts"]');
  });

  it('gives the workers only settings the code reads, including the required ones', () => {
    const env = worker.environment ?? {};
    const read = envVarsReadBySource();
    expect(Object.keys(env).filter((name) => !read.has(name))).toEqual([]);
    for (const required of ['TEMPORAL_ADDRESS', 'DATABASE_URL_FILE', 'TEMPORAL_NAMESPACE', 'MODEL_PROVIDER']) {
      expect(read.has(required), `${required} is read by src`).toBe(true);
      expect(env[required], `${required} is set for the workers`).toBeTruthy();
    }
  });

  it('points the workers at the Temporal service and at the ledger database', () => {
    const env = worker.environment ?? {};
    expect(env.TEMPORAL_ADDRESS).toBe('temporal-frontend:7233');
    expect(env.DATABASE_URL_FILE).toBe('/run/secrets/ledger_worker_url');
    expect(env.MODEL_PROVIDER).toBe('${MODEL_PROVIDER:-mock}'); // offline mock unless the user opts into a real provider
  });

  it("keeps the roles' secrets apart: the model keys only for workers, the read-only URL only for the admin page", () => {
    expect(worker.secrets).toEqual(['ledger_worker_url', 'openai_api_key', 'anthropic_api_key', 'report_webhook_secret', 'payload_keys']);
    expect(worker.environment?.OPENAI_API_KEY_FILE).toBe('/run/secrets/openai_api_key');
    expect(worker.environment?.ANTHROPIC_API_KEY_FILE).toBe('/run/secrets/anthropic_api_key');
    for (const [name, s] of Object.entries(services)) {
      for (const key of ['openai_api_key', 'anthropic_api_key']) {
        if (name !== 'worker') expect([name, s.secrets ?? []]).not.toEqual([name, expect.arrayContaining([key])]);
      }
      if (name !== 'admin') expect([name, s.secrets ?? []]).not.toEqual([name, expect.arrayContaining(['ledger_readonly_url'])]);
    }
  });

  it('keeps report artifacts on a volume the replicas share', () => {
    expect(worker.volumes).toEqual([`reports:${worker.environment?.CRONLEDGER_REPORTS_DIR}`, `${TLS_MOUNT}:ro`]);
    expect(Object.keys(compose.volumes)).toContain('reports');
  });

  describe('Temporal runs from the same config as `dev up --temporal server`', () => {
    const mount = `./${relative(root, TEMPORAL_CONFIG_DIR)}:/etc/cronledger/config:ro`;
    const template = readFileSync(join(TEMPORAL_CONFIG_DIR, `${TEMPORAL_CONFIG_ENV}.yaml`), 'utf8');
    /** The variables the template reads, those with a `default` before them on their line or those without. */
    const templateVars = (withDefault: boolean) =>
      new Set(
        template
          .split('\n')
          .flatMap((line) => [...line.matchAll(/env "([A-Z_]+)"/g)].map((m) => [m[1], line.slice(0, m.index).includes('default')] as const))
          .filter(([, hasDefault]) => hasDefault === withDefault)
          .map(([name]) => name),
      );
    const entrypoint = services['temporal-frontend'].entrypoint as string[];
    const script = entrypoint[2];
    /** What the container passes to the config: compose's environment plus what its entrypoint exports. */
    const composeEnvironment = (): Record<string, string> => {
      const exported = /export (.*)/.exec(script)![1];
      const fromScript = Object.fromEntries([...exported.matchAll(/([A-Z_]+)=("[^"]*"|\S+)/g)].map((m) => [m[1], m[2]]));
      // The broadcast address is the container's IP at run time; any IP stands in for it here.
      return { ...services['temporal-frontend'].environment, ...fromScript, TEMPORAL_BROADCAST_ADDRESS: '172.18.0.5' };
    };
    const devEnvironment = (): Record<string, string> => {
      const ports = { grpc: 7300, membership: 20300 };
      const stack = {
        temporal: {
          port: 7233,
          tls: { dir: '/tmp/cronledger-data/temporal-tls', serverName: TEMPORAL_TLS_SERVER_NAME },
          server: { databases: { temporal: 'temporal', visibility: 'temporal_visibility' }, ports: {} },
        },
        postgres: { port: 5432, passwords: { temporal: 'x' } },
      } as unknown as StackFile;
      Object.assign(stack.temporal.server!.ports, { frontendHttp: 7243, frontend: ports, history: ports, matching: ports, worker: ports });
      return temporalServerEnvironment(stack, '/tmp/cronledger-data');
    };

    it('starts each of the four services with the command line `dev up` uses, from the committed config, mounted read-only', () => {
      expect(entrypoint.slice(0, 2)).toEqual(['/bin/sh', '-c']);
      const exec = /exec (.*)/.exec(script)![1].split(/\s+/);
      expect(exec).toEqual(['temporal-server', ...temporalServiceArgs('/etc/cronledger', 'frontend').slice(0, -1), '"$$0"']);
      for (const service of TEMPORAL_SERVICES) {
        const s = services[`temporal-${service}`];
        expect([service, s.command, s.volumes, s.entrypoint]).toEqual([service, [service], [mount, `${TLS_MOUNT}:ro`], entrypoint]);
      }
      expect(composeEnvironment().DYNAMIC_CONFIG_FILE_PATH).toBe('/etc/cronledger/config/dynamicconfig.yaml');
      expect(devEnvironment().DYNAMIC_CONFIG_FILE_PATH).toMatch(/\/dynamicconfig\.yaml$/);
    });

    it("raises the schedules' start rate and the scheduler's pollers as `dev up` does for the dev server, so both modes run under the same rule", () => {
      const dynamic = parse(readFileSync(join(TEMPORAL_CONFIG_DIR, 'dynamicconfig.yaml'), 'utf8')) as Record<string, { value: unknown }[]>;
      for (const [key, value] of Object.entries(DEV_SERVER_DYNAMIC_CONFIG)) expect([key, dynamic[key]]).toEqual([key, [{ value }]]);
    });

    it("lets no query wait on the scheduler's sticky queue past history's 30 s query deadline", () => {
      // history sends a query to the sticky queue for up to the sticky timeout, then to the normal queue, all within its
      // client's 30 s deadline (client/history DefaultTimeout): at 60 s an unanswered sticky query failed every describe
      const options = DEV_SERVER_DYNAMIC_CONFIG['worker.perNamespaceWorkerOptions'] as { StickyScheduleToStartTimeout: string };
      const stickySeconds = Number(/^(\d+)s$/.exec(options.StickyScheduleToStartTimeout)?.[1]);
      expect(stickySeconds).toBe(60); // shorter brings back the schedules' start stall (docs/decisions/scheduler-settings.md)
      expect(DEV_SERVER_DYNAMIC_CONFIG['system.enableStickyQuery']).toBe(false);
    });

    it('sets every variable the config needs, in both places, and none it does not read', () => {
      const required = templateVars(false);
      const read = new Set([...required, ...templateVars(true)]);
      expect([...required].sort()).toEqual(['BIND_ON_IP', 'DYNAMIC_CONFIG_FILE_PATH', 'POSTGRES_PWD', 'POSTGRES_SEEDS', 'POSTGRES_USER']);
      for (const [where, env] of [
        ['compose', composeEnvironment()],
        ['dev up', devEnvironment()],
      ] as const) {
        expect([where, [...required].filter((name) => !env[name])]).toEqual([where, []]);
        expect([where, Object.keys(env).filter((name) => !read.has(name))]).toEqual([where, []]);
      }
    });

    it('renders (with the server binary itself) to the same config in both, but for addresses, ports and paths', () => {
      const binaries = findTemporalServerBinaries();
      if (!binaries) throw new Error('the Temporal server binary is missing: build it with `./scripts/install.sh --with-temporal-server`');
      const render = (env: Record<string, string>) =>
        parse(
          execFileSync(binaries.server, ['--config', TEMPORAL_CONFIG_DIR, '--env', TEMPORAL_CONFIG_ENV, 'render-config'], {
            env: { PATH: process.env.PATH, ...env, POSTGRES_PWD: 'x' },
            encoding: 'utf8',
            stdio: ['ignore', 'pipe', 'ignore'],
          }),
        ) as unknown;
      const leaves = (value: unknown, path = ''): [string, unknown][] =>
        value !== null && typeof value === 'object'
          ? Object.entries(value).flatMap(([k, v]) => leaves(v, `${path}.${k}`))
          : [[path, value]];
      const addressing =
        /connectaddr|listenaddress|port$|bindonip|broadcastaddress|rpcaddress|httpaddress|filepath|certfile|keyfile|cafiles\.\d+$/i;
      const comparable = (env: Record<string, string>) => leaves(render(env)).filter(([path]) => !addressing.test(path));
      const compose = comparable(composeEnvironment());
      const dev = comparable(devEnvironment());
      expect(compose.length).toBeGreaterThan(50);
      expect(compose).toContainEqual(['.persistence.datastores.default.sql.pluginName', 'postgres12']);
      expect(compose).toContainEqual(['.persistence.numHistoryShards', 4]);
      expect(dev).toEqual(compose);
    });
  });

  describe("Temporal's door: mutual TLS on the frontend, and payloads encrypted", () => {
    const template = readFileSync(join(TEMPORAL_CONFIG_DIR, `${TEMPORAL_CONFIG_ENV}.yaml`), 'utf8');
    const clients = ['worker', 'cli', 'admin', 'temporal-setup'];

    it('renders a frontend that requires a client certificate signed by the CA, and a system worker that shows one', () => {
      const binaries = findTemporalServerBinaries();
      if (!binaries) throw new Error('the Temporal server binary is missing: build it with `./scripts/install.sh --with-temporal-server`');
      const rendered = parse(
        execFileSync(binaries.server, ['--config', TEMPORAL_CONFIG_DIR, '--env', TEMPORAL_CONFIG_ENV, 'render-config'], {
          env: { PATH: process.env.PATH, BIND_ON_IP: '0.0.0.0', POSTGRES_PWD: 'x' },
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'ignore'],
        }),
      ) as { global: { tls: Record<string, Record<string, unknown>> } };
      const tls = rendered.global.tls;
      expect(tls.frontend.server).toMatchObject({
        certFile: `${TLS_DIR}/frontend.crt`,
        keyFile: `${TLS_DIR}/frontend.key`,
        requireClientAuth: true,
        clientCaFiles: [`${TLS_DIR}/ca.crt`],
      });
      // Temporal's worker service (schedules) calls the frontend too, and must show a certificate like any client.
      expect(tls.systemWorker).toMatchObject({
        certFile: `${TLS_DIR}/client.crt`,
        keyFile: `${TLS_DIR}/client.key`,
        client: { serverName: TEMPORAL_TLS_SERVER_NAME, rootCaFiles: [`${TLS_DIR}/ca.crt`] },
      });
      expect(template).toContain('requireClientAuth: true');
    });

    it('makes the certificates in a one-shot into a volume that every Temporal service mounts read-only', () => {
      const certs = services['temporal-certs'];
      expect(certs.entrypoint).toEqual(['/bin/sh', `/etc/cronledger/config/${basename(MAKE_CERTS_SCRIPT)}`, '/tls']);
      expect(certs.volumes).toEqual([`./${relative(root, TEMPORAL_CONFIG_DIR)}:/etc/cronledger/config:ro`, 'temporal-tls:/tls']);
      expect(Object.keys(compose.volumes)).toContain('temporal-tls');
      for (const service of TEMPORAL_SERVICES) {
        const s = services[`temporal-${service}`];
        expect([service, s.volumes]).toEqual([service, expect.arrayContaining([`${TLS_MOUNT}:ro`])]);
        expect([service, s.depends_on?.['temporal-certs']]).toEqual([service, { condition: 'service_completed_successfully' }]);
      }
    });

    it('has every client present the client certificate: workers, the CLI, the admin page, the setup job and the Web UI server', () => {
      const expected = temporalTlsEnv({ dir: TLS_DIR, serverName: TEMPORAL_TLS_SERVER_NAME });
      expect(compose['x-temporal-client-tls']).toEqual(expected);
      for (const name of clients) {
        const s = services[name];
        expect([name, s.environment]).toEqual([name, expect.objectContaining({ ...expected, TEMPORAL_ADDRESS: 'temporal-frontend:7233' })]);
        expect([name, s.volumes]).toEqual([name, expect.arrayContaining([`${TLS_MOUNT}:ro`])]);
      }
      // The Web UI server's config template has its own names for the same files.
      const ui = services['temporal-ui'];
      expect(ui.environment).toMatchObject({
        TEMPORAL_TLS_CA: `${TLS_DIR}/ca.crt`,
        TEMPORAL_TLS_CERT: `${TLS_DIR}/client.crt`,
        TEMPORAL_TLS_KEY: `${TLS_DIR}/client.key`,
        TEMPORAL_TLS_SERVER_NAME: TEMPORAL_TLS_SERVER_NAME,
        TEMPORAL_TLS_ENABLE_HOST_VERIFICATION: 'true',
      });
      expect(ui.volumes).toEqual([`${TLS_MOUNT}:ro`]);
      // Every service that talks to the frontend is one of these, or a Temporal service (none is left without TLS).
      const talksToFrontend = Object.entries(services)
        .filter(([, s]) => Object.values(s.environment ?? {}).some((v) => String(v).includes('temporal-frontend:7233')))
        .map(([name]) => name);
      expect(talksToFrontend.filter((n) => !n.startsWith('temporal-') || n === 'temporal-setup').sort()).toEqual([...clients].sort());
    });

    it('makes certificates that verify, with the frontend named as its clients check it, and a client-only client certificate', () => {
      const dir = mkdtempSync(join(tmpdir(), 'cronledger-certs-'));
      try {
        execFileSync('sh', [MAKE_CERTS_SCRIPT, dir], { encoding: 'utf8' });
        const files = (names: string[]) => names.map((n) => join(dir, n));
        expect(
          execFileSync('openssl', ['verify', '-CAfile', ...files(['ca.crt', 'frontend.crt', 'client.crt'])], { encoding: 'utf8' }),
        ).toBe(`${join(dir, 'frontend.crt')}: OK\n${join(dir, 'client.crt')}: OK\n`);
        const text = (n: string) => execFileSync('openssl', ['x509', '-noout', '-text', '-in', join(dir, n)], { encoding: 'utf8' });
        expect(text('frontend.crt')).toContain(`DNS:${TEMPORAL_TLS_SERVER_NAME}, DNS:localhost, IP Address:127.0.0.1`);
        expect(text('frontend.crt')).toMatch(/Extended Key Usage: *\n *TLS Web Server Authentication\n/);
        expect(text('client.crt')).toMatch(/Extended Key Usage: *\n *TLS Web Client Authentication\n/);
        expect(readdirSync(dir).sort()).toEqual(['ca.crt', 'client.crt', 'client.key', 'frontend.crt', 'frontend.key']); // no CA key left
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('encrypts payloads with a key from a secret file in every process that talks to Temporal, and points the Web UI at /codec', () => {
      expect(compose.secrets.payload_keys.file).toBe('./secrets/payload_keys');
      for (const name of ['worker', 'cli', 'admin']) {
        expect([name, services[name].secrets]).toEqual([name, expect.arrayContaining(['payload_keys'])]);
        expect([name, services[name].environment?.[PAYLOAD_KEYS_FILE_VARIABLE]]).toEqual([name, '/run/secrets/payload_keys']);
      }
      const adminPort = /--port\s+(\d+)/.exec(script(services.admin))![1];
      expect(services['temporal-ui'].environment).toMatchObject({
        TEMPORAL_CODEC_ENDPOINT: `http://127.0.0.1:${adminPort}/codec`,
        TEMPORAL_CODEC_INCLUDE_CREDENTIALS: 'true',
      });
      // /codec's CORS answers the origin the admin page is told the Web UI has, which is where compose publishes it.
      const uiPort = services['temporal-ui'].ports![0].split(':')[1];
      expect(services.admin.environment?.TEMPORAL_UI_URL).toBe(`http://127.0.0.1:${uiPort}`);
    });
  });

  describe('the admin page and Prometheus', () => {
    const admin = services.admin;
    const prometheus = services.prometheus;
    const configPath = join(root, 'prometheus', 'prometheus.yml');
    const config = parse(readFileSync(configPath, 'utf8')) as {
      scrape_configs: {
        job_name: string;
        authorization?: { type?: string; credentials_file?: string };
        static_configs?: { targets: string[] }[];
        dns_sd_configs?: { names: string[]; type: string; port: number }[];
      }[];
    };
    const job = (name: string) => config.scrape_configs.find((j) => j.job_name === name)!;

    it('passes `promtool check config` (Debian prometheus package), credentials file included', () => {
      const dir = mkdtempSync(join(tmpdir(), 'cronledger-promtool-'));
      try {
        expect(execFileSync('promtool', ['check', 'config', '--syntax-only', configPath], { encoding: 'utf8' })).toContain('SUCCESS');
        // The full check also opens the credentials file: the same config with the token at a path that exists here.
        const token = join(dir, 'admin_token');
        writeFileSync(token, 'a-test-token-of-some-length\n');
        const copy = join(dir, 'prometheus.yml');
        const original = readFileSync(configPath, 'utf8');
        expect(original).toContain('/run/secrets/admin_token');
        writeFileSync(copy, original.replaceAll('/run/secrets/admin_token', token));
        expect(execFileSync('promtool', ['check', 'config', copy], { encoding: 'utf8' })).toContain('SUCCESS');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('runs the admin page off loopback with its token from the secret Prometheus reads, as the read-only role', () => {
      expect(compose.secrets.admin_token.file).toBe('./secrets/admin_token');
      expect(admin.secrets).toEqual(['admin_token', 'ledger_readonly_url', 'payload_keys']);
      expect(prometheus.secrets).toEqual(['admin_token']);
      // compose mounts a secret at /run/secrets/<name>: the admin reads its token there, and Prometheus sends the same file
      const secretPath = '/run/secrets/admin_token';
      expect([admin.entrypoint, admin.command].flat()).toEqual([
        'node',
        'bin/cronledger.js',
        'admin',
        '--host',
        '0.0.0.0',
        '--port',
        '8234',
      ]);
      expect(admin.environment?.CRONLEDGER_ADMIN_TOKEN_FILE).toBe(secretPath);
      expect(job('cronledger-admin').authorization).toEqual({ type: 'Bearer', credentials_file: secretPath });
      expect(admin.environment).not.toHaveProperty('CRONLEDGER_ADMIN_TOKEN');
      expect(admin.environment?.CRONLEDGER_ADMIN_DATABASE_URL_FILE).toBe('/run/secrets/ledger_readonly_url'); // the read-only role
      expect(admin.depends_on).toMatchObject({ migrate: { condition: 'service_completed_successfully' } });
    });

    it('scrapes the admin page on the port it listens on, and every worker replica on its SDK metrics port, by DNS', () => {
      const adminPort = /--port\s(\d+)/.exec(script(admin))![1];
      expect(job('cronledger-admin').static_configs).toEqual([{ targets: [`admin:${adminPort}`] }]);
      const workerPort = /^0\.0\.0\.0:(\d+)$/.exec(worker.environment!.CRONLEDGER_WORKER_METRICS_ADDRESS)![1];
      expect(job('cronledger-worker').dns_sd_configs).toEqual([
        { names: ['worker'], type: 'A', port: Number(workerPort), refresh_interval: '30s' },
      ]);
      expect(job('cronledger-worker').static_configs).toBeUndefined(); // replicas come and go; none is listed by hand
      expect(prometheus.volumes).toContain('./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro');
      expect(prometheus.depends_on as unknown).toEqual(['admin', 'worker']);
    });

    it("scrapes each of the Temporal server's four services on the metrics port its config gives a container", () => {
      const serverConfig = readFileSync(join(TEMPORAL_CONFIG_DIR, `${TEMPORAL_CONFIG_ENV}.yaml`), 'utf8');
      const port = /listenAddress: "\{\{ \$bindOnIP \}\}:\{\{ default "(\d+)" \(env "TEMPORAL_METRICS_PORT"\) \}\}"/.exec(
        serverConfig,
      )?.[1];
      expect(port).toBeDefined();
      expect(job('temporal-server').static_configs).toEqual([{ targets: TEMPORAL_SERVICES.map((s) => `temporal-${s}:${port}`) }]);
      // compose leaves every service on the default: one process per container
      for (const s of TEMPORAL_SERVICES) expect(services[`temporal-${s}`].environment).not.toHaveProperty('TEMPORAL_METRICS_PORT');
    });
  });
});
