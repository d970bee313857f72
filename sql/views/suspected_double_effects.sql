create or replace view ledger.suspected_double_effects as
select * from ledger.suspected_double_effects_at(null, null);

revoke all on ledger.suspected_double_effects from public;
grant select on ledger.suspected_double_effects to effect_operator, effect_readonly;
