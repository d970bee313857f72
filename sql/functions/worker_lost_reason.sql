-- What a worker's silence means, said once for every place that says it.
create or replace function ledger.worker_lost_reason(lease ledger.worker_leases) returns text
language sql stable as $$
    select format('no heartbeat from %s since %s (lease of %s): the worker is presumed lost mid-call',
                  coalesce((lease).worker, 'its worker'),
                  to_char(((lease).lease_until - (lease).lease) at time zone 'UTC',
                          'YYYY-MM-DD HH24:MI:SS"Z"'),
                  (lease).lease)
$$;

revoke all on function ledger.worker_lost_reason(ledger.worker_leases) from public;
grant execute on function ledger.worker_lost_reason(ledger.worker_leases) to effect_operator, effect_readonly;
