-- The budget guard cost a run one more durable commit: the claim was a transaction and the reservation another. Here
-- the claim is one statement too (claim_run, the rules of src/db/runs.ts claimRun, which now calls it), and
-- claim_and_reserve does both in one statement, so one commit: a run that wins (or already owns) its claim reserves in
-- the same transaction; a run that does not win it reserves nothing. reserve_budget comes last, so the user's month row
-- is locked only for the rest of that statement and the commit, with no network round trip while it is held.

-- Claims a slot (see claimRun's comment): the first insert of the key wins (generation 1); the execution that owns it
-- already is still the owner (its claim retried); a retry takes the claim over only from the execution it names and
-- only while that claim is not completed or blocked; anyone else is recorded as a duplicate. Returns ClaimOutcome's JSON.
create function claim_run(
  p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamptz,
  p_worker_id text, p_manual boolean, p_supersedes_run_id text
) returns jsonb language plpgsql as $$
declare
  v_generation integer;
  v_owner runs;
begin
  insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, claimed_by, manual)
  values (p_key, p_task_id, p_user_id, p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual)
  on conflict (idempotency_key) do nothing
  returning generation into v_generation;
  if not found and p_supersedes_run_id is not null and p_supersedes_run_id <> p_run_id then
    update runs set generation = generation + 1, workflow_id = p_workflow_id, temporal_run_id = p_run_id, claimed_by = p_worker_id,
                    status = 'running', claimed_at = now(), finished_at = null, duration_ms = null, error = null
     where idempotency_key = p_key and temporal_run_id = p_supersedes_run_id and status not in ('completed', 'blocked')
     returning generation into v_generation;
    if found then
      update run_attempts set status = 'stale', finished_at = now() where temporal_run_id = p_supersedes_run_id and status = 'running';
    end if;
  end if;
  if v_generation is not null then
    insert into run_attempts (idempotency_key, generation, workflow_id, temporal_run_id, claimed_by)
    values (p_key, v_generation, p_workflow_id, p_run_id, p_worker_id);
    return jsonb_build_object('claimed', true, 'ownerWorkflowRunId', p_run_id, 'generation', v_generation);
  end if;
  -- A statement of its own: it sees the claim that a concurrent insert of the same key committed while we waited.
  select * into v_owner from runs where idempotency_key = p_key;
  if v_owner.temporal_run_id = p_run_id then
    return jsonb_build_object('claimed', true, 'ownerWorkflowRunId', p_run_id, 'generation', v_owner.generation);
  end if;
  insert into run_duplicates (temporal_run_id, workflow_id, idempotency_key, task_id, user_id, detected_by)
  values (p_run_id, p_workflow_id, p_key, p_task_id, p_user_id, p_worker_id) on conflict do nothing;
  return jsonb_build_object('claimed', false, 'ownerWorkflowRunId', v_owner.temporal_run_id, 'generation', v_owner.generation,
                            'ownerStatus', v_owner.status);
end
$$;

-- The claim, then (only when it is this execution's) the budget decision and reservation, in one statement and so in
-- one transaction. Run again by the same execution (a local activity re-run after its worker died), it returns the same
-- claim (the owner's branch of claim_run) and the same reservation (reserve_budget's retried-request branch).
-- Returns {"claim": ClaimOutcome, "decision": ReserveDecision or null}.
create function claim_and_reserve(
  p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamptz,
  p_worker_id text, p_manual boolean, p_supersedes_run_id text,
  p_calls jsonb, p_expiry_seconds integer, p_at timestamptz
) returns jsonb language plpgsql as $$
declare
  v_claim jsonb := claim_run(p_key, p_task_id, p_user_id, p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual,
                             p_supersedes_run_id);
begin
  if not (v_claim ->> 'claimed')::boolean then
    return jsonb_build_object('claim', v_claim, 'decision', null);
  end if;
  return jsonb_build_object('claim', v_claim,
           'decision', reserve_budget(p_user_id, p_run_id, p_workflow_id, p_calls, true, p_expiry_seconds, p_at));
end
$$;

revoke execute on function claim_run(text, text, text, text, text, timestamptz, text, boolean, text),
  claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz) from public;
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    grant execute on function claim_run(text, text, text, text, text, timestamptz, text, boolean, text),
      claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz) to cronledger_app;
  end if;
end
$$;
