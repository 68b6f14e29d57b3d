"""Pools on partitions as Kafka's default partitioner places them, and the scale bench's split check."""

from stream.tools.bench.scale import one_pool_per_partition, partition_of, split_by_partitions

#: murmur2 of these keys as Kafka's Java client computes it (its own unit test's cases, signed ints)
JAVA_MURMUR2 = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
                "a-little-bit-longer-string": -1486304829, "abc": 479470107}


def test_partition_of_is_the_java_clients_default_partitioner() -> None:
    for key, h in JAVA_MURMUR2.items():
        for n in (1, 5, 12, 13, 24):
            assert partition_of(key, n) == (h & 0x7FFFFFFF) % n


def test_doubling_partitions_moves_a_pool_only_to_its_partition_plus_the_old_count() -> None:
    pools = [f"s{i:02d}" for i in range(48)]
    moved = [p for p in pools if partition_of(p, 12) != partition_of(p, 24)]
    assert 0 < len(moved) < len(pools)
    assert all(partition_of(p, 24) == partition_of(p, 12) + 12 for p in moved)
    assert all(partition_of(p, 24) == partition_of(p, 12) for p in pools if p not in moved)


def test_one_pool_per_partition_covers_every_partition() -> None:
    assert sorted(partition_of(p, 12) for p in one_pool_per_partition(12)) == list(range(12))


def test_split_by_partitions_finds_whole_partitions_per_worker() -> None:
    split = split_by_partitions([10, 20, 30, 0], [30, 30])
    assert split is not None
    assert sorted(sorted(ps) for ps in split if 2 not in ps) in ([[0, 1]], [[0, 1, 3]])


def test_split_by_partitions_refuses_a_partition_shared_by_two_workers() -> None:
    assert split_by_partitions([10, 20, 30], [15, 45]) is None
    assert split_by_partitions([10, 20, 30], [30, 40]) is None  # 10 messages handled twice
