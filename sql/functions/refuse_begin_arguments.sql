-- Which argument of a begin names nothing, raised. open_effect tests them
-- all in one condition, which every call passes, and calls this only when
-- one failed. Blank is missing: a key or a name of spaces only names
-- nothing.
create or replace function ledger.refuse_begin_arguments(
    op_key text, action text, target text, requested_by text, params jsonb
) returns void
language plpgsql immutable as $$
begin
    if coalesce(btrim(refuse_begin_arguments.op_key), '') = '' then
        raise exception 'ledger: op_key is required and may not be blank' using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(btrim(refuse_begin_arguments.action), '') = ''
       or coalesce(btrim(refuse_begin_arguments.target), '') = '' then
        raise exception 'ledger: action and target are required and may not be blank (key %)',
            refuse_begin_arguments.op_key
            using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(btrim(refuse_begin_arguments.requested_by), '') = '' then
        raise exception 'ledger: requested_by is required and may not be blank (key %)',
            refuse_begin_arguments.op_key
            using errcode = 'invalid_parameter_value';
    end if;
    raise exception 'ledger: params must be a JSON object (key %)', refuse_begin_arguments.op_key
        using errcode = 'invalid_parameter_value';
end
$$;

revoke all on function ledger.refuse_begin_arguments(text,text,text,text,jsonb) from public;
