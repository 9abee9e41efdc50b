/**
 * Forgetting a run's messages in the cluster's message storage: the address of
 * its workflow entity (`Workflow/<name>`, the run id, its shard) cleared. Used
 * by the SQL layers when a run's thread is pruned; a failure to clear is ignored
 * (the run's own records are gone either way).
 */
import { EntityAddress } from "@effect/cluster/EntityAddress"
import * as EntityId from "@effect/cluster/EntityId"
import { EntityType } from "@effect/cluster/EntityType"
import * as ShardId from "@effect/cluster/ShardId"
import type * as MessageStorage from "@effect/cluster/MessageStorage"
import type * as Sharding from "@effect/cluster/Sharding"
import * as Effect from "effect/Effect"

const clear = (storage: MessageStorage.MessageStorage["Type"], workflow: string, entityId: EntityId.EntityId, shardId: ShardId.ShardId) =>
  storage.clearAddress(new EntityAddress({ entityType: EntityType.make(`Workflow/${workflow}`), entityId, shardId })).pipe(Effect.ignore)

/** Clears the messages of run `runId` of workflow `workflow`. */
export const purger =
  (storage: MessageStorage.MessageStorage["Type"], sharding: Sharding.Sharding["Type"]) =>
  (workflow: string, runId: string): Effect.Effect<void> => {
    const entityId = EntityId.make(runId)
    return clear(storage, workflow, entityId, sharding.getShardId(entityId, "default"))
  }

/**
 * As `purger`, in a process that runs no Sharding (a prune beside the server that
 * owns a SQLite file): the SQL message storage clears an address by its entity
 * type and id, the shard is not read.
 */
export const sqlPurger =
  (storage: MessageStorage.MessageStorage["Type"]) =>
  (workflow: string, runId: string): Effect.Effect<void> => clear(storage, workflow, EntityId.make(runId), ShardId.make("default", 1))
