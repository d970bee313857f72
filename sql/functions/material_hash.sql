-- Everything material to an intent in one hash: what a tombstone keeps of
-- a pruned key so that a replay with other terms is still rejected. A
-- booking's range is among its terms; an effect with none hashes as it
-- always did.
create or replace function ledger.material_hash(
    params_hash text, action text, target text, amount_minor bigint, currency text, provider text,
    during tstzrange default null
) returns text
language sql stable as $$
    select encode(sha256(convert_to((jsonb_build_array(
        params_hash, action, target, amount_minor, currency, provider)
        || case when during is null then '[]'::jsonb else jsonb_build_array(during::text) end)::text,
        'UTF8')), 'hex')
$$;

revoke all on function ledger.material_hash(text,text,text,bigint,text,text,tstzrange) from public;
