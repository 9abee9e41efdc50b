/**
 * Forgetting a run's messages in the cluster's message storage: the address of
 * its workflow entity (`Workflow/<name>`, the run id, its shard) cleared. Used
 * by the SQL layers when a run's thread is pruned; a failure to clear is ignored
 * (the run's own records are gone either way).
 */
import { EntityAddress } from "@effect/cluster/EntityAddress"
import * as EntityId from "@effect/cluster/EntityId"
import { EntityType } from "@effect/cluster/EntityType"
import type * as MessageStorage from "@effect/cluster/MessageStorage"
import type * as Sharding from "@effect/cluster/Sharding"
import * as Effect from "effect/Effect"

/** Clears the messages of run `runId` of workflow `workflow`. */
export const purger =
  (storage: MessageStorage.MessageStorage["Type"], sharding: Sharding.Sharding["Type"]) =>
  (workflow: string, runId: string): Effect.Effect<void> => {
    const entityId = EntityId.make(runId)
    return storage.clearAddress(
      new EntityAddress({
        entityType: EntityType.make(`Workflow/${workflow}`),
        entityId,
        shardId: sharding.getShardId(entityId, "default")
      })
    ).pipe(Effect.ignore)
  }
