-- A heartbeat lease per action, set by its policy: an action whose provider
-- answers in seconds is found lost in seconds, one whose provider takes
-- minutes is given a longer lease, whatever each worker was configured
-- with. Null: the caller's own lease. Callers that take no lease (the bare
-- SQL API) are untouched: a policy's lease applies only to a caller that
-- beats.
alter table ledger.action_policies
    add column heartbeat_lease interval
        constraint action_policies_heartbeat_lease_check
        check (heartbeat_lease is null
               or heartbeat_lease between interval '1 second' and interval '1 hour');

-- The claim answers the lease in force, so a worker beats at a third of the
-- policy's lease rather than of its own.
alter type ledger.dispatch_answer add attribute lease_in_force interval;

-- Their results or parameters change: sql/functions makes them anew.
drop function ledger.mark_dispatched(text, text, text, text, interval);
drop function ledger.op_set_policy(text, text, text, interval, boolean, bigint, boolean, boolean, text, text,
                                   boolean, boolean, boolean, text, integer);
drop function ledger.heartbeat(text, interval, text);
