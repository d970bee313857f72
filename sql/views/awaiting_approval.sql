create or replace view ledger.awaiting_approval as select * from ledger.awaiting_approval_at(null);

revoke all on ledger.awaiting_approval from public;
grant select on ledger.awaiting_approval to effect_operator, effect_readonly;
