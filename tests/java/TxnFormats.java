import java.io.File;
import java.nio.ByteBuffer;
import java.util.HexFormat;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.EndTransactionMarker;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.storage.internals.log.AbortedTxn;
import org.apache.kafka.storage.internals.log.ProducerStateEntry;
import org.apache.kafka.storage.internals.log.ProducerStateManager;
import org.apache.kafka.storage.internals.log.TransactionIndex;

/**
 * Kafka's own classes for the transaction formats kraft-py writes, so tests can compare
 * bytes (run with the Kafka jars: scripts/kafka-tools.sh tests/java/TxnFormats.java ...):
 *
 *   marker PRODUCER_ID PRODUCER_EPOCH COMMIT COORDINATOR_EPOCH TIMESTAMP
 *       prints the hex of MemoryRecords.withEndTransactionMarker at offset 0, no leader epoch
 *   read-index FILE
 *       prints each entry of a .txnindex as "producerId firstOffset lastOffset lastStableOffset"
 *   write-index FILE PID:FIRST:LAST:LSO...
 *       writes those entries with Kafka's TransactionIndex
 *   read-snapshot FILE
 *       prints each producer of a .snapshot as "producerId epoch lastSeq lastDataOffset
 *       lastOffsetDelta lastTimestamp coordinatorEpoch currentTxnFirstOffset"
 */
public class TxnFormats {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "marker": {
                ControlRecordType type =
                        Boolean.parseBoolean(args[3]) ? ControlRecordType.COMMIT : ControlRecordType.ABORT;
                EndTransactionMarker marker = new EndTransactionMarker(type, Integer.parseInt(args[4]));
                MemoryRecords records = MemoryRecords.withEndTransactionMarker(
                        0L, Long.parseLong(args[5]), -1, Long.parseLong(args[1]),
                        Short.parseShort(args[2]), marker);
                ByteBuffer buffer = records.buffer();
                byte[] out = new byte[buffer.remaining()];
                buffer.get(out);
                System.out.println(HexFormat.of().formatHex(out));
                break;
            }
            case "read-index": {
                TransactionIndex index = new TransactionIndex(0L, new File(args[1]));
                index.sanityCheck();
                for (AbortedTxn txn : index.allAbortedTxns()) {
                    System.out.println(txn.producerId() + " " + txn.firstOffset() + " "
                            + txn.lastOffset() + " " + txn.lastStableOffset());
                }
                index.close();
                break;
            }
            case "write-index": {
                TransactionIndex index = new TransactionIndex(0L, new File(args[1]));
                for (int i = 2; i < args.length; i++) {
                    String[] p = args[i].split(":");
                    index.append(new AbortedTxn(Long.parseLong(p[0]), Long.parseLong(p[1]),
                            Long.parseLong(p[2]), Long.parseLong(p[3])));
                }
                index.flush();
                index.close();
                break;
            }
            case "read-snapshot": {
                for (ProducerStateEntry e : ProducerStateManager.readSnapshot(new File(args[1]))) {
                    System.out.println(e.producerId() + " " + e.producerEpoch() + " " + e.lastSeq()
                            + " " + e.lastDataOffset() + " " + e.lastOffsetDelta() + " "
                            + e.lastTimestamp() + " " + e.coordinatorEpoch() + " "
                            + e.currentTxnFirstOffset().orElse(-1L));
                }
                break;
            }
            default:
                throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }
}
