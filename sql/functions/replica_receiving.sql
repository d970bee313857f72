-- Whether a standby hears from its primary now: its WAL receiver streams
-- and has heard within what its pings allow (as replica_lag judges it).
-- Null on a primary. A console reading a standby whose primary is gone (a
-- failover under way) says so at once, whatever its stale mark for the lag.
-- Security definer, as replica_lag: without the receiver's details a
-- running receiver is trusted.
create or replace function ledger.replica_receiving() returns boolean
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$
    select case when pg_is_in_recovery() then exists (
        select 1
          from pg_stat_wal_receiver r,
               (select make_interval(secs => coalesce(nullif(s.setting::float8, 0), 60000) / 2000 + 5) as silence
                  from pg_settings s where s.name = 'wal_receiver_timeout') a
         where r.status is null
            or (r.status = 'streaming'
                and (r.last_msg_receipt_time is null or now() - r.last_msg_receipt_time <= a.silence)))
    end
$$;

revoke all on function ledger.replica_receiving() from public;
grant execute on function ledger.replica_receiving() to effect_operator, effect_readonly;
