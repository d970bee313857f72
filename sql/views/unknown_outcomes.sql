create or replace view ledger.unknown_outcomes as select * from ledger.unknown_outcomes_at(null);

revoke all on ledger.unknown_outcomes from public;
grant select on ledger.unknown_outcomes to effect_operator, effect_readonly;
