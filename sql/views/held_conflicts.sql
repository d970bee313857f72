create or replace view ledger.held_conflicts as select * from ledger.held_conflicts_at(null);

revoke all on ledger.held_conflicts from public;
grant select on ledger.held_conflicts to effect_operator, effect_readonly;
