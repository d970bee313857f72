-- The columns that say what an effect is never change. A trigger of its
-- own, fired only by an UPDATE that names one of them: a column no SET
-- names cannot change, so the writer's updates, which name none, skip it
-- (the guard below runs for every write, and each of its checks costs every
-- writer call). Triggers fire in the order of their names, so this one
-- refuses a change of identity before the guard looks at anything else.
create or replace function ledger.effects_frozen_identity() returns trigger
language plpgsql as $$
begin
    if new.op_key is distinct from old.op_key
       or new.action is distinct from old.action
       or new.target is distinct from old.target
       or new.params_hash is distinct from old.params_hash
       or new.params is distinct from old.params
       or new.created_at is distinct from old.created_at
       or new.creation_version_stored is distinct from old.creation_version_stored then
        raise exception 'ledger: the identity of effect % (key, action, target, params) never changes', old.op_key
            using errcode = 'check_violation',
                  hint = 'a different intent needs a new operation key';
    end if;
    return new;
end
$$;

revoke all on function ledger.effects_frozen_identity() from public;
