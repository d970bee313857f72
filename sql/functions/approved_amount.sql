-- The amount an approval allows, as the writer recorded it in the effect's
-- params: "approved_amount_minor", an integer in the effect's currency.
-- Anything else (absent, a string, a fraction) means "not stated".
create or replace function ledger.approved_amount(params jsonb) returns bigint
language sql immutable as $$
    select case when jsonb_typeof(params -> 'approved_amount_minor') = 'number'
                 and (params ->> 'approved_amount_minor') ~ '^-?[0-9]{1,18}$'
                then (params ->> 'approved_amount_minor')::bigint end
$$;

revoke all on function ledger.approved_amount(jsonb) from public;
grant execute on function ledger.approved_amount(jsonb) to effect_operator, effect_readonly;
