create or replace view ledger.open_escalations as select * from ledger.open_escalations_at(null);

revoke all on ledger.open_escalations from public;
grant select on ledger.open_escalations to effect_operator, effect_readonly;
