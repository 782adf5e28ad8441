DROP FUNCTION unigen_lease_slots(uuid, integer, uuid, integer, double precision);
DROP FUNCTION unigen_settle_shares(uuid[], uuid[], timestamptz[], text[], bigint[], bigint[], bigint[], bigint[],
    uuid[], uuid[], text[], text[], text[], bigint[], text[], jsonb[], bigint[], bigint[]);
DROP FUNCTION unigen_allowance_shrink(uuid, bigint, bigint);
DROP FUNCTION unigen_allowance_grow(uuid, uuid, text, bigint, bigint, bigint, bigint, bigint, bigint, timestamptz);
