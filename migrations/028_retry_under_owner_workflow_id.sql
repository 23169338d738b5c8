-- A retry takes a claim over only under the workflow ID that owns it. Temporal runs at most one execution of a workflow
-- ID at a time, so a retry that is running proves the execution it supersedes is closed: a workflow started by hand
-- under another ID, naming a running owner's run ID, can no longer take the slot from under it (it is a duplicate).
create or replace function claim_run(
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
    update runs set generation = generation + 1, temporal_run_id = p_run_id, claimed_by = p_worker_id,
                    status = 'running', claimed_at = now(), finished_at = null, duration_ms = null, error = null
     where idempotency_key = p_key and temporal_run_id = p_supersedes_run_id and workflow_id = p_workflow_id
       and status not in ('completed', 'blocked')
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
