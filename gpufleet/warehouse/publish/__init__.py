"""Publishing the warehouse: one writer at a time on the slot readers do not use, published
atomically (`write_transaction`), and readers on the published snapshot, never blocked
(`connect_read_only`). The two slots, the writer lock, the publish log and the catch-up of
the stale slot are explained in `docs/warehouse.md`."""

from gpufleet.warehouse.publish.log import current_generation
from gpufleet.warehouse.publish.read_only import connect_read_only
from gpufleet.warehouse.publish.slot_files import writer_lock
from gpufleet.warehouse.publish.slots import (
    DEFAULT_LOCK_TIMEOUT_S,
    LOCK_FILE_NAME,
    lock_path,
    write_transaction,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "LOCK_FILE_NAME",
    "connect_read_only",
    "current_generation",
    "lock_path",
    "write_transaction",
    "writer_lock",
]
