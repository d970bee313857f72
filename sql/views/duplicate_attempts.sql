create or replace view ledger.duplicate_attempts as select * from ledger.duplicate_attempts_at(null);

revoke all on ledger.duplicate_attempts from public;
grant select on ledger.duplicate_attempts to effect_operator, effect_readonly;
