-- The arguments of a call as the key is made from them and the params are
-- stored: the money argument as its integer, the normalised arguments
-- normalised, every number by value.
create or replace function ledger.canonical_arguments(arguments jsonb, normalise jsonb default null, money text default null)
returns jsonb
language sql stable parallel safe as $$
    select ledger.params_by_value(coalesce(
        (select jsonb_object_agg(member.key, case
                    when member.key = money and jsonb_typeof(member.value) <> 'null'
                        then to_jsonb(ledger.money_value(member.value, member.key))
                    when jsonb_typeof(member.value) = 'string' and normalise ? member.key
                        then to_jsonb(ledger.normalised(member.value #>> '{}', normalise -> member.key))
                    else member.value end)
           from jsonb_each(arguments) as member),
        '{}'::jsonb))
$$;

revoke all on function ledger.canonical_arguments(jsonb,jsonb,text) from public;
grant execute on function ledger.canonical_arguments(jsonb,jsonb,text) to effect_agent, effect_operator, effect_readonly;
