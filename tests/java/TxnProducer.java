// Kafka's Java transactional producer (kafka-clients 4.1.0) against kraft-py, run by
// tests/kraft/test_txn_java.py: a committed and an aborted transaction, each with produced
// records and consumer offsets, then a second producer with the same transactional.id
// fencing the first. Prints one line per step; the test asserts them and the offsets.
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], txnId = args[2], group = args[3];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", txnId);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        TopicPartition input = new TopicPartition(topic, 0);
        ConsumerGroupMetadata metadata = new ConsumerGroupMetadata(group);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "k", "committed")).get();
            producer.sendOffsetsToTransaction(Map.of(input, new OffsetAndMetadata(7)), metadata);
            producer.commitTransaction();
            System.out.println("committed");
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 1, "k", "aborted")).get();
            producer.sendOffsetsToTransaction(Map.of(input, new OffsetAndMetadata(9)), metadata);
            producer.abortTransaction();
            System.out.println("aborted");
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "k", "zombie")).get();
            try (KafkaProducer<String, String> successor = new KafkaProducer<>(props)) {
                successor.initTransactions();
                System.out.println("successor initialised");
                try {
                    producer.commitTransaction();
                    System.out.println("zombie committed");
                } catch (KafkaException e) {
                    System.out.println("zombie refused: " + e.getClass().getSimpleName());
                }
                successor.beginTransaction();
                successor.sendOffsetsToTransaction(
                        Map.of(input, new OffsetAndMetadata(11)), metadata);
                successor.commitTransaction();
                System.out.println("successor committed");
            }
        }
    }
}
