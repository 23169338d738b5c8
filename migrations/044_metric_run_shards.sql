-- The run counters are split into 64 shards by backend instead of 8. A claim and a completion each update their
-- backend's shard of a counter row (running, completed, ...) and hold its lock until they commit, so backends whose
-- pids fell into the same of 8 shards waited for each other's commits: about 30 backends in P1 meant four or so per
-- shard row. The readers sum the shards, so what they report is unchanged.
create or replace function metric_add_run(p_status text, p_tier text, p_duration_ms bigint, p_sign integer) returns void
language plpgsql as $$
begin
  insert into metric_run_counts as c (shard, status, tier, runs) values (pg_backend_pid() % 64, p_status, p_tier, p_sign)
  on conflict (shard, status, tier) do update set runs = c.runs + excluded.runs;
  perform metric_observe('run_duration', p_duration_ms, p_sign);
end
$$;
