-- Every state change: the versions that changed the state.
create or replace view ledger.effect_events as
select v.id, v.effect_id, e.op_key, v.from_state, v.state as to_state, v.actor, v.db_role, v.reason, v.at
  from ledger.effect_history v
  join ledger.effects e on e.id = v.effect_id
 where v.from_state is distinct from v.state;

revoke all on ledger.effect_events from public;
grant select on ledger.effect_events to effect_operator, effect_readonly;
