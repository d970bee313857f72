-- Whether a provider record is already another effect's reference: two
-- refunds of one invoice must not settle on, nor reverse, the same record.
create or replace function ledger.held_by_another_effect(effect ledger.effects, reference text) returns boolean
language sql stable as $$
    select exists (select 1 from ledger.effects o
                    where o.external_ref = reference and o.id <> (effect).id
                      and o.provider is not distinct from (effect).provider)
$$;

revoke all on function ledger.held_by_another_effect(ledger.effects,text) from public;
