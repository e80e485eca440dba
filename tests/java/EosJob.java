// One member of an exactly-once consume-transform-produce job (kafka-clients 4.1.0), run by
// tests/kraft/test_eos_java.py as a separate JVM beside another member of the same group.
// Kafka's canonical loop (KIP-447): a read_committed KafkaConsumer subscribed to the input,
// a transactional KafkaProducer with this member's own transactional.id, and per poll one
// transaction holding the transformed records and the consumed offsets
// (sendOffsetsToTransaction with the consumer's group metadata, so a member of an older
// generation is fenced). The transaction version is the cluster's (2 by default).
//
// Errors as Kafka's ExactlyOnceMessageProcessor example handles them: an abortable error
// aborts the transaction and rewinds the consumer to its group's committed offsets; a fatal
// one (fenced, or an abort that cannot complete) closes both clients and starts afresh with
// the same ids, which fences whatever the old producer left open. A commit or abort that
// times out is retried, as the producer requires.
//
//   EosJob BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID STOP_FILE
//
// Runs until STOP_FILE exists (checked between transactions, so it leaves none open).
// While a file hold-TRANSACTIONAL_ID exists beside it, the member stops inside its next
// transaction, once the records are written (flushed, acknowledged) and the offsets sent,
// before the commit, prints "holding N" and waits to be killed: the test's breakpoint.
// Prints one line per event: "ready", "assigned [..]", "committed N" (records so far),
// "aborted: ...", "restart: ...", "holding N", "stopped".
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class EosJob {
    static final int RETRIES = 10;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], group = args[3];
        String txnId = args[4];
        Path stop = Path.of(args[5]);
        Path hold = stop.resolveSibling("hold-" + txnId);
        long done = 0;
        while (!Files.exists(stop)) {
            try (KafkaConsumer<String, String> consumer = consumer(bootstrap, group);
                    KafkaProducer<String, String> producer = producer(bootstrap, txnId)) {
                producer.initTransactions();
                consumer.subscribe(List.of(input), new Listener());
                System.out.println("ready");
                while (!Files.exists(stop)) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                    if (records.isEmpty()) {
                        continue;
                    }
                    try {
                        producer.beginTransaction();
                        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                        for (ConsumerRecord<String, String> r : records) {
                            String value = r.value().toUpperCase() + "|" + r.partition() + ":" + r.offset();
                            producer.send(new ProducerRecord<>(output, r.key(), value));
                            offsets.put(new TopicPartition(r.topic(), r.partition()),
                                    new OffsetAndMetadata(r.offset() + 1));
                        }
                        producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                        if (Files.exists(hold)) { // the test's breakpoint: kill me here
                            producer.flush();
                            System.out.println("holding " + records.count());
                            while (true) {
                                Thread.sleep(100);
                            }
                        }
                        commit(producer);
                        done += records.count();
                        System.out.println("committed " + done);
                    } catch (ProducerFencedException | FencedInstanceIdException
                            | OutOfOrderSequenceException | UnsupportedVersionException
                            | AuthorizationException e) {
                        throw e; // fatal: a new pair of clients below
                    } catch (KafkaException e) {
                        System.out.println("aborted: " + e);
                        abort(producer);
                        rewind(consumer);
                    }
                }
            } catch (KafkaException e) {
                System.out.println("restart: " + e);
            }
        }
        System.out.println("stopped");
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("isolation.level", "read_committed");
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("max.poll.records", "50");
        // A killed member leaves the group within seconds, not Kafka's default 45 s.
        props.put("session.timeout.ms", "10000");
        props.put("heartbeat.interval.ms", "1000");
        props.put("max.poll.interval.ms", "60000");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(props);
    }

    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", txnId);
        props.put("transaction.timeout.ms", "20000");
        props.put("linger.ms", "5");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(props);
    }

    static void commit(KafkaProducer<String, String> producer) {
        for (int attempt = 1; ; attempt++) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) { // the commit must be retried, not aborted
                if (attempt == RETRIES) {
                    throw new KafkaException("commit timed out " + RETRIES + " times", e);
                }
            }
        }
    }

    static void abort(KafkaProducer<String, String> producer) {
        for (int attempt = 1; ; attempt++) {
            try {
                producer.abortTransaction();
                return;
            } catch (TimeoutException e) {
                if (attempt == RETRIES) {
                    throw new KafkaException("abort timed out " + RETRIES + " times", e);
                }
            }
        }
    }

    // After an abort, consume again from what the group committed (read_committed makes
    // the consumer's OffsetFetch require stable offsets: none held by an open transaction).
    static void rewind(KafkaConsumer<String, String> consumer) {
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata offset = committed.get(tp);
            if (offset == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, offset.offset());
            }
        }
    }

    static class Listener implements ConsumerRebalanceListener {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            System.out.println("revoked " + partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            System.out.println("assigned " + partitions);
        }
    }
}
