import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.protocol.Errors;

/**
 * kraft-jepsen's Java client lane (jepsen/java_lane.py): Apache Kafka's own producer and
 * consumer, driven one command at a time over stdin, each answered by one line on stdout.
 * The harness records the history (it writes the invoke before sending a command and the
 * completion after reading its answer), so this program only does what it is told.
 *
 *   send PARTITION VALUE   ok OFFSET | error KAFKA_ERROR_NAME
 *   poll                   ok P,OFFSET,VALUE... ; P,HIGH_WATERMARK... ; P,POSITION... | error NAME
 *   new                    ok   (new clients, from offset 0: a new process of the history)
 *
 * With a seventh argument, TRANSACTIONAL_ID, the producer is transactional (that id; its
 * initTransactions runs at the first begin, so a coordinator that is not there yet fails a
 * command, not the start) and the consumer reads read_committed, and three more commands:
 *
 *   begin                  ok | error NAME   (initTransactions first, once per producer)
 *   commit                 ok | error NAME
 *   abort                  ok | error NAME
 *
 * Arguments: BOOTSTRAP TOPIC PARTITIONS REQUEST_TIMEOUT_MS DELIVERY_TIMEOUT_MS POLL_WAIT_MS
 * [TRANSACTIONAL_ID]. It prints "ready" once its clients exist, before the first command.
 */
public class JepsenClient {
    static String bootstrap, topic;
    static int partitions, requestTimeoutMs, deliveryTimeoutMs, pollWaitMs;
    static String transactionalId; // null: the plain lane
    static boolean initialized; // the transactional producer's initTransactions succeeded
    static KafkaProducer<String, String> producer;
    static KafkaConsumer<String, String> consumer;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        topic = args[1];
        partitions = Integer.parseInt(args[2]);
        requestTimeoutMs = Integer.parseInt(args[3]);
        deliveryTimeoutMs = Integer.parseInt(args[4]);
        pollWaitMs = Integer.parseInt(args[5]);
        transactionalId = args.length > 6 ? args[6] : null;
        start();
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] words = line.split(" ");
            String answer;
            try {
                answer = switch (words[0]) {
                    case "send" -> send(Integer.parseInt(words[1]), words[2]);
                    case "poll" -> poll();
                    case "begin" -> begin();
                    case "commit" -> { producer.commitTransaction(); yield "ok"; }
                    case "abort" -> { producer.abortTransaction(); yield "ok"; }
                    case "new" -> { producer.close(Duration.ZERO); consumer.close(Duration.ZERO); start(); yield "ok"; }
                    default -> "error unknown-command";
                };
            } catch (Exception e) {
                answer = "error " + name(e);
            }
            System.out.println(answer);
            System.out.flush();
        }
        producer.close(Duration.ZERO);
        consumer.close(Duration.ZERO);
    }

    static void start() {
        Properties p = common();
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("max.in.flight.requests.per.connection", "1");
        p.put("linger.ms", "0");
        p.put("delivery.timeout.ms", String.valueOf(deliveryTimeoutMs));
        p.put("max.block.ms", String.valueOf(requestTimeoutMs)); // send() waiting for metadata
        if (transactionalId != null) {
            p.put("transactional.id", transactionalId);
            // What holds read_committed readers behind a transaction this JVM left open.
            p.put("transaction.timeout.ms", String.valueOf(deliveryTimeoutMs));
            // initTransactions, commit and abort wait for the coordinator up to this long.
            p.put("max.block.ms", String.valueOf(deliveryTimeoutMs));
        }
        initialized = false;
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        producer = new KafkaProducer<>(p);
        Properties c = common();
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "none"); // a position past the log end is an error
        c.put("fetch.max.wait.ms", String.valueOf(pollWaitMs));
        if (transactionalId != null) c.put("isolation.level", "read_committed");
        c.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        c.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        consumer = new KafkaConsumer<>(c);
        List<TopicPartition> all = new ArrayList<>();
        for (int i = 0; i < partitions; i++) all.add(new TopicPartition(topic, i));
        consumer.assign(all);
        for (TopicPartition tp : all) consumer.seek(tp, 0);
    }

    static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", String.valueOf(requestTimeoutMs));
        p.put("metadata.max.age.ms", "1000");
        return p;
    }

    static String send(int partition, String value) throws InterruptedException {
        try {
            long offset = producer.send(new ProducerRecord<>(topic, partition, null, value)).get().offset();
            return "ok " + offset;
        } catch (ExecutionException e) {
            return "error " + name(e.getCause());
        }
    }

    static String begin() {
        if (!initialized) {
            producer.initTransactions();
            initialized = true;
        }
        producer.beginTransaction();
        return "ok";
    }

    static String poll() {
        StringBuilder out = new StringBuilder("ok");
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(pollWaitMs))) {
            out.append(' ').append(r.partition()).append(',').append(r.offset()).append(',').append(r.value());
        }
        out.append(" ;");
        for (TopicPartition tp : consumer.assignment()) {
            var lag = consumer.currentLag(tp); // the high watermark less the position, once fetched
            if (lag.isPresent()) out.append(' ').append(tp.partition()).append(',').append(consumer.position(tp) + lag.getAsLong());
        }
        out.append(" ;"); // the positions: past the aborted records and markers skipped too
        for (TopicPartition tp : consumer.assignment()) {
            out.append(' ').append(tp.partition()).append(',').append(consumer.position(tp));
        }
        return out.toString();
    }

    /** A failure by its Kafka error name (NOT_ENOUGH_REPLICAS...), or the exception's class. */
    static String name(Throwable e) {
        Errors error = Errors.forException(e);
        return error == Errors.UNKNOWN_SERVER_ERROR ? e.getClass().getSimpleName() : error.name();
    }
}
