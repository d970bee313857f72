-- Actions effects were begun with in the last 30 days that have no policy
-- of their own, on a ledger whose operators write policies (one besides the
-- ledger's own compensate): `effectwatch check` warns about them, since
-- each runs under the defaults and may be a misspelling of one that does
-- not. A ledger with no policy at all runs on the defaults by choice.
create or replace view ledger.actions_without_policy as
select e.action, count(*) as effects, max(e.created_at) as last_used
  from ledger.effects e
 where e.created_at > now() - interval '30 days'
   and not exists (select 1 from ledger.action_policies p where p.action = e.action)
   and exists (select 1 from ledger.action_policies p where p.action <> 'compensate')
 group by e.action;

revoke all on ledger.actions_without_policy from public;
grant select on ledger.actions_without_policy to effect_operator, effect_readonly;
