create or replace view ledger.exposure as
select * from ledger.exposure_at(null, null);

revoke all on ledger.exposure from public;
grant select on ledger.exposure to effect_operator, effect_readonly;
