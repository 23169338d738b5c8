import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot, TEMPORAL_SERVICES, type StackFile } from '../../src/config';
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
};
const { services } = compose;
const worker = services.worker;
const script = (s: Service) => [s.entrypoint, s.command].flat().join('\n');

/** Every environment variable the source reads, as `env.NAME`, `process.env.NAME` or `env['NAME']`. */
function envVarsReadBySource(): Set<string> {
  const names = new Set<string>();
  const files = readdirSync(join(root, 'src'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
  for (const file of files) {
    const text = readFileSync(join(root, 'src', file), 'utf8');
    for (const m of text.matchAll(/\benv(?:\.([A-Z][A-Z0-9_]*)\b|\[['"]([A-Z][A-Z0-9_]*)['"]\])/g)) names.add(m[1] ?? m[2]);
  }
  return names;
}

describe('docker-compose.yml', () => {
  it('has Temporal on PostgreSQL, its schema and setup jobs, the Web UI, a separate ledger PostgreSQL and the workers', () => {
    expect(Object.keys(services).sort()).toEqual(
      [
        'admin',
        'cli',
        'ledger-postgres',
        'migrate',
        'temporal-frontend',
        'temporal-history',
        'temporal-matching',
        'temporal-worker',
        'temporal-postgresql',
        'temporal-schema',
        'temporal-setup',
        'temporal-ui',
        'prometheus',
        'worker',
      ].sort(),
    );
    for (const service of TEMPORAL_SERVICES) {
      const s = services[`temporal-${service}`];
      expect(s.environment).toMatchObject({ POSTGRES_SEEDS: 'temporal-postgresql', TEMPORAL_DB: 'temporal' });
      expect(s.depends_on).toEqual({ 'temporal-schema': { condition: 'service_completed_successfully' } });
    }
    expect(script(services['temporal-schema'])).toContain('--ep temporal-postgresql');
  });

  it('pins every image, at the versions `dev up` runs (the server and UI that --temporal server builds, also in the CLI v1.5.1)', () => {
    const server = `temporalio/server:${TEMPORAL_SERVER_VERSION.slice(1)}`;
    const images = Object.fromEntries(Object.entries(services).flatMap(([name, s]) => (s.image ? [[name, s.image]] : [])));
    expect(images).toEqual({
      'temporal-postgresql': 'postgres:16',
      'temporal-schema': `temporalio/admin-tools:${TEMPORAL_SERVER_VERSION.slice(1)}-tctl-1.18.4-cli-1.5.0`,
      'temporal-history': server,
      'temporal-matching': server,
      'temporal-frontend': server,
      'temporal-worker': server,
      'temporal-setup': `temporalio/admin-tools:${TEMPORAL_SERVER_VERSION.slice(1)}-tctl-1.18.4-cli-1.5.0`,
      'temporal-ui': `temporalio/ui:${TEMPORAL_UI_VERSION.slice(1)}`,
      'ledger-postgres': 'postgres:16',
      migrate: 'cronledger-worker',
      worker: 'cronledger-worker',
      cli: 'cronledger-worker',
      admin: 'cronledger-worker',
      prometheus: 'prom/prometheus:v2.55.1',
    });
  });

  it('publishes only the Web UI, Temporal gRPC, the admin page and Prometheus, on 127.0.0.1; both databases stay off the host network', () => {
    const published = Object.fromEntries(Object.entries(services).flatMap(([name, s]) => (s.ports ? [[name, s.ports]] : [])));
    expect(published).toEqual({
      'temporal-frontend': ['127.0.0.1:7233:7233'],
      'temporal-ui': ['127.0.0.1:8233:8080'],
      admin: ['127.0.0.1:8234:8234'],
      prometheus: ['127.0.0.1:9090:9090'],
    });
    expect(services['temporal-ui'].environment).toEqual({ TEMPORAL_ADDRESS: 'temporal-frontend:7233' });
  });

  it('has no password in the file: each comes from the environment (.env, ignored by git and docker), required, without default', () => {
    const secrets = Object.entries(services).flatMap(([name, s]) =>
      Object.entries(s.environment ?? {})
        .filter(([k]) => /PASSWORD|PWD|_URL$/.test(k) && !['REPORT_WEBHOOK_URL', 'OPENAI_BASE_URL', 'TEMPORAL_UI_URL'].includes(k))
        .map(([k, v]) => [`${name}.${k}`, v] as const),
    );
    expect(secrets.length).toBeGreaterThanOrEqual(8);
    for (const [where, value] of secrets) {
      const refs = [...value.matchAll(/\$\{([A-Z_]+)(:?[?-])?[^}]*\}/g)];
      expect(refs.length, `${where} takes its password from the environment`).toBeGreaterThan(0);
      for (const ref of refs) expect(ref[2], `${where}: \${${ref[1]}} is required, with no default`).toBe(':?');
      const literal = value.replace(/\$\{[^}]*\}/g, '').match(/:\/\/[^:@/]+:([^@]+)@/)?.[1];
      expect(literal, `${where} has no literal password`).toBeUndefined();
    }
    for (const ignore of ['.gitignore', '.dockerignore']) expect(readFileSync(join(root, ignore), 'utf8').split('\n')).toContain('.env');
  });

  it('creates the ledger roles and migrates as the owner in a one-shot; workers and the CLI connect as the application role', () => {
    const migrate = services.migrate;
    expect(script(migrate)).toContain('node bin/cronledger.js db roles && node bin/cronledger.js db migrate');
    expect(new URL(migrate.environment!.DATABASE_OWNER_URL.replace(/\$\{[^}]*\}/, 'x')).username).toBe('cronledger_owner');
    expect(migrate.depends_on).toEqual({ 'ledger-postgres': { condition: 'service_healthy' } });
    expect(migrate.environment).toHaveProperty('CRONLEDGER_READONLY_PASSWORD'); // so `db roles` gives the admin page's role its password
    for (const name of ['worker', 'cli']) {
      const url = new URL(services[name].environment!.DATABASE_URL.replace(/\$\{[^}]*\}/, 'x'));
      expect([name, url.username, url.hostname, url.pathname]).toEqual([name, 'cronledger_app', 'ledger-postgres', '/cronledger']);
      expect(services[name].environment).not.toHaveProperty('DATABASE_OWNER_URL');
      expect(services[name].depends_on?.migrate).toEqual({ condition: 'service_completed_successfully' });
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
    for (const required of ['TEMPORAL_ADDRESS', 'DATABASE_URL', 'TEMPORAL_NAMESPACE', 'MODEL_PROVIDER']) {
      expect(read.has(required), `${required} is read by src`).toBe(true);
      expect(env[required], `${required} is set for the workers`).toBeTruthy();
    }
  });

  it('points the workers at the Temporal service and at the ledger database', () => {
    const env = worker.environment ?? {};
    expect(env.TEMPORAL_ADDRESS).toBe('temporal-frontend:7233');
    expect(new URL(env.DATABASE_URL.replace(/\$\{[^}]*\}/, 'x')).port).toBe('5432');
    expect(env.MODEL_PROVIDER).toBe('${MODEL_PROVIDER:-mock}'); // offline mock unless the user opts into a real provider
  });

  it('keeps report artifacts on a volume the replicas share', () => {
    expect(worker.volumes).toEqual([`reports:${worker.environment?.CRONLEDGER_REPORTS_DIR}`]);
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
        temporal: { port: 7233, server: { databases: { temporal: 'temporal', visibility: 'temporal_visibility' }, ports: {} } },
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
        expect([service, s.command, s.volumes, s.entrypoint]).toEqual([service, [service], [mount], entrypoint]);
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
      const addressing = /connectaddr|port$|bindonip|broadcastaddress|rpcaddress|httpaddress|filepath/i;
      const comparable = (env: Record<string, string>) => leaves(render(env)).filter(([path]) => !addressing.test(path));
      const compose = comparable(composeEnvironment());
      const dev = comparable(devEnvironment());
      expect(compose.length).toBeGreaterThan(50);
      expect(compose).toContainEqual(['.persistence.datastores.default.sql.pluginName', 'postgres12']);
      expect(compose).toContainEqual(['.persistence.numHistoryShards', 4]);
      expect(dev).toEqual(compose);
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
      expect(Object.keys(compose.secrets)).toEqual(['admin_token']);
      expect(compose.secrets.admin_token.file).toBe('./secrets/admin_token');
      expect(readFileSync(join(root, '.gitignore'), 'utf8').split('\n')).toContain('secrets/');
      expect(readFileSync(join(root, '.dockerignore'), 'utf8').split('\n')).toContain('secrets');
      for (const s of [admin, prometheus]) expect(s.secrets).toEqual(['admin_token']);
      // compose mounts a secret at /run/secrets/<name>: the admin reads its token there ($$ is compose's escaped $),
      // and Prometheus sends the same file
      const secretPath = '/run/secrets/admin_token';
      expect(script(admin)).toContain(
        `CRONLEDGER_ADMIN_TOKEN="$$(cat ${secretPath})" exec node bin/cronledger.js admin --host 0.0.0.0 --port 8234`,
      );
      expect(job('cronledger-admin').authorization).toEqual({ type: 'Bearer', credentials_file: secretPath });
      expect(admin.environment).not.toHaveProperty('CRONLEDGER_ADMIN_TOKEN');
      const url = new URL(admin.environment!.CRONLEDGER_ADMIN_DATABASE_URL.replace(/\$\{[^}]*\}/, 'x'));
      expect([url.username, url.hostname, url.pathname]).toEqual(['cronledger_readonly', 'ledger-postgres', '/cronledger']);
      expect(admin.depends_on).toMatchObject({ migrate: { condition: 'service_completed_successfully' } });
    });

    it('scrapes the admin page on the port it listens on, and every worker replica on its SDK metrics port, by DNS', () => {
      const adminPort = /--port (\d+)/.exec(script(admin))![1];
      expect(job('cronledger-admin').static_configs).toEqual([{ targets: [`admin:${adminPort}`] }]);
      const workerPort = /^0\.0\.0\.0:(\d+)$/.exec(worker.environment!.CRONLEDGER_WORKER_METRICS_ADDRESS)![1];
      expect(job('cronledger-worker').dns_sd_configs).toEqual([
        { names: ['worker'], type: 'A', port: Number(workerPort), refresh_interval: '30s' },
      ]);
      expect(job('cronledger-worker').static_configs).toBeUndefined(); // replicas come and go; none is listed by hand
      expect(prometheus.volumes).toContain('./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro');
      expect(prometheus.depends_on as unknown).toEqual(['admin', 'worker']);
    });
  });
});
