-- Seconds a standby's data may be behind its primary; null on a primary.
-- Replaying: the age of the last replayed commit, or 0 once all that was
-- received is replayed (an idle primary sends nothing, so the age of its
-- last commit alone would call a caught-up standby late). But a receiver
-- that receives nothing has replayed all it received too: with no receiver
-- streaming, or one that has heard nothing from the primary for longer than
-- its pings allow (it asks for an answer after wal_receiver_timeout / 2),
-- the data is as old as the last word from the primary, or the last commit
-- replayed (ledger.replica_receiving judges the receiver). Security
-- definer: pg_stat_wal_receiver shows its details only to privileged
-- roles, which a console's login is not.
create or replace function ledger.replica_lag() returns float8
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$
    with replay as (
        select case when pg_last_wal_receive_lsn() is not distinct from pg_last_wal_replay_lsn()
                    then 0::float8
                    -- A commit replayed after this read began is no lag at all.
                    else greatest(0, coalesce(extract(epoch from now() - pg_last_xact_replay_timestamp())::float8, 0))
               end as lag
    )
    select case when pg_is_in_recovery() then
        case when ledger.replica_receiving()
             then (select lag from replay)
             else greatest((select lag from replay),
                           extract(epoch from now() - coalesce(
                               (select r.last_msg_receipt_time from pg_stat_wal_receiver r),
                               pg_last_xact_replay_timestamp()))::float8)
        end
    end
$$;

revoke all on function ledger.replica_lag() from public;
grant execute on function ledger.replica_lag() to effect_operator, effect_readonly;
