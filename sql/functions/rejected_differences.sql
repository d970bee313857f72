create or replace function ledger.rejected_differences(
    op_key text, action text, target text, params jsonb, amount_minor bigint, currency text,
    provider text
) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    with recorded as (
        select e.* from ledger.effects e where e.op_key = rejected_differences.op_key
    ), terms(position, field, was, now) as (
        select 1, 'action', to_jsonb(r.action), to_jsonb(ledger.action_name(rejected_differences.action)) from recorded r
        union all
        select 2, 'target', to_jsonb(r.target), to_jsonb(rejected_differences.target) from recorded r
        union all
        select 3, 'amount_minor', to_jsonb(r.amount_minor), to_jsonb(rejected_differences.amount_minor) from recorded r
        union all
        select 4, 'currency', to_jsonb(r.currency), to_jsonb(upper(rejected_differences.currency)) from recorded r
        union all
        select 5, 'provider', to_jsonb(r.provider), to_jsonb(rejected_differences.provider) from recorded r
        union all
        select 6, 'params.' || name, r.params -> name, rejected_differences.params -> name
          from recorded r,
               lateral (select jsonb_object_keys(case when jsonb_typeof(r.params) = 'object' then r.params
                                                      else '{}'::jsonb end)
                        union
                        select jsonb_object_keys(case when jsonb_typeof(rejected_differences.params) = 'object'
                                                      then rejected_differences.params else '{}'::jsonb end)) k(name)
    )
    select coalesce(jsonb_agg(jsonb_build_object('field', field,
                                                 'recorded', coalesce(was, 'null'::jsonb),
                                                 'now', coalesce(now, 'null'::jsonb))
                              order by position, field), '[]'::jsonb)
      from terms
     where coalesce(was, 'null'::jsonb) is distinct from coalesce(now, 'null'::jsonb)
$$;

revoke all on function ledger.rejected_differences(text,text,text,jsonb,bigint,text,text) from public;
