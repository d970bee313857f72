create or replace view ledger.overdue_pending as select * from ledger.overdue_pending_at(null);

revoke all on ledger.overdue_pending from public;
grant select on ledger.overdue_pending to effect_operator, effect_readonly;
