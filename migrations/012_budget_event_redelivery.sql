-- The budget sweeper re-delivers threshold events that no run delivered, backing off per event: it needs the moment of
-- each event's last attempt (attempts alone can't say how long ago it failed).
alter table budget_events add column last_attempt_at timestamptz;
