-- The application role's share of the tables 004 added (004 came before the roles of 005 existed):
-- every execution that owned a slot is recorded and then closed; unbookable usage is appended, never changed.
grant select, insert, update on run_attempts to cronledger_app;
grant select, insert on usage_exceptions to cronledger_app;
grant usage on sequence run_attempts_id_seq, usage_exceptions_id_seq to cronledger_app;
