import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot } from '../src/config';
import { SEARCH_ATTRIBUTES } from '../src/constants';

/**
 * docker-compose.yml cannot be started here (no Docker engine), so it is checked against the code instead:
 * the services and versions it promises, and that the workers get exactly the settings the code reads.
 */

interface Service {
  image?: string;
  build?: string;
  command?: string | string[];
  entrypoint?: string | string[];
  environment?: Record<string, string>;
  ports?: string[];
  volumes?: string[];
  depends_on?: Record<string, { condition: string }>;
  deploy?: { replicas?: number };
}

const root = repoRoot();
const compose = parse(readFileSync(join(root, 'docker-compose.yml'), 'utf8')) as { services: Record<string, Service>; volumes: Record<string, unknown> };
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
      ['ledger-postgres', 'temporal', 'temporal-postgresql', 'temporal-schema', 'temporal-setup', 'temporal-ui', 'worker'].sort(),
    );
    expect(services.temporal.environment).toMatchObject({ DB: 'postgres12', POSTGRES_SEEDS: 'temporal-postgresql' });
    expect(services.temporal.depends_on).toEqual({ 'temporal-schema': { condition: 'service_completed_successfully' } });
    expect(script(services['temporal-schema'])).toContain('--ep temporal-postgresql');
  });

  it('pins every image, at the versions the dev server runs (temporal CLI v1.5.1: server 1.29.1, UI 2.42.1)', () => {
    const images = Object.fromEntries(Object.entries(services).flatMap(([name, s]) => (s.image ? [[name, s.image]] : [])));
    expect(images).toEqual({
      'temporal-postgresql': 'postgres:16',
      'temporal-schema': 'temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0',
      temporal: 'temporalio/server:1.29.1',
      'temporal-setup': 'temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0',
      'temporal-ui': 'temporalio/ui:2.42.1',
      'ledger-postgres': 'postgres:16',
      worker: 'cronledger-worker',
    });
  });

  it('publishes Temporal on 7233, the Web UI on 8233 (the dev server ports) and the ledger on 5433', () => {
    expect(services.temporal.ports).toEqual(['7233:7233']);
    expect(services['temporal-ui'].ports).toEqual(['8233:8080']);
    expect(services['temporal-ui'].environment).toEqual({ TEMPORAL_ADDRESS: 'temporal:7233' });
    expect(services['ledger-postgres'].ports).toEqual(['5433:5432']);
    expect(services['temporal-postgresql'].ports).toBeUndefined(); // Temporal's database stays private
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

  it('runs three worker replicas of this repo, started only once Temporal is set up and the ledger is healthy', () => {
    expect(worker.build).toBe('.');
    expect(worker.deploy?.replicas).toBe(3);
    expect(worker.command).toEqual(['node', '--import', 'tsx', 'src/worker.ts']);
    expect(worker.depends_on).toEqual({
      'temporal-setup': { condition: 'service_completed_successfully' },
      'ledger-postgres': { condition: 'service_healthy' },
    });
    const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
    expect(dockerfile).toContain('CMD ["node", "--import", "tsx", "src/worker.ts"]');
    for (const dir of ['src', 'migrations']) expect(dockerfile).toContain(`COPY ${dir} ./${dir}`); // the worker migrates on start
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

  it('points the workers at the Temporal service and at the ledger database with its own credentials', () => {
    const env = worker.environment ?? {};
    expect(env.TEMPORAL_ADDRESS).toBe('temporal:7233');
    const url = new URL(env.DATABASE_URL);
    const ledger = services['ledger-postgres'].environment ?? {};
    expect([url.hostname, url.port, url.username, url.password, url.pathname]).toEqual([
      'ledger-postgres',
      '5432',
      ledger.POSTGRES_USER,
      ledger.POSTGRES_PASSWORD,
      `/${ledger.POSTGRES_DB}`,
    ]);
    expect(env.MODEL_PROVIDER).toBe('${MODEL_PROVIDER:-mock}'); // offline mock unless the user opts into a real provider
  });

  it('keeps report artifacts on a volume the replicas share', () => {
    expect(worker.volumes).toEqual([`reports:${worker.environment?.CRONLEDGER_REPORTS_DIR}`]);
    expect(Object.keys(compose.volumes)).toContain('reports');
  });
});
