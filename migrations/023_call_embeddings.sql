-- An embedding call's vector, written by the call itself and read by the run's completion into its memory, so that
-- the vector never travels through workflow history (a 1,536-number vector is about 30 KB of JSON). One row per call of
-- an execution's embed step, keyed like its ledger entry (`<runId>:embed:<attempt>`); written once (an activity retry of
-- the same call keeps the first vector: the same text, the same model).
create table call_embeddings (
  call_key    text        primary key,
  embedding   jsonb       not null,
  created_at  timestamptz not null default now()
);

grant select, insert on call_embeddings to cronledger_app;

-- What users asked their agents, like memories: not the admin page's business.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    revoke all on call_embeddings from cronledger_readonly;
  end if;
end
$$;
