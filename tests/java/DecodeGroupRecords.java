import java.nio.ByteBuffer;
import java.util.HexFormat;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;

/**
 * Reads __consumer_offsets records with Kafka's own group coordinator serde and prints each
 * as Kafka sees it, one per line: proof that kraft-py writes Kafka's formats. Each argument
 * is KEY_HEX:VALUE_HEX (an empty value is a tombstone). Run with the Kafka jars on the class
 * path (scripts/kafka-tools.sh tests/java/DecodeGroupRecords.java ARGS...).
 */
public class DecodeGroupRecords {
    public static void main(String[] args) {
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        for (String arg : args) {
            String[] parts = arg.split(":", -1);
            ByteBuffer key = ByteBuffer.wrap(HexFormat.of().parseHex(parts[0]));
            ByteBuffer value = parts[1].isEmpty() ? null : ByteBuffer.wrap(HexFormat.of().parseHex(parts[1]));
            System.out.println(serde.deserialize(key, value));
        }
    }
}
