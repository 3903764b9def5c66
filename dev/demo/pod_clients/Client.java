import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A Java (kafka-clients) producer or consumer that runs as a pod's only process, launched as a single source file
 * from the kct-spark image, whose /opt/spark/jars hold kafka-clients (dev/demo/client_pods.py mounts this file from
 * a ConfigMap). It sets nothing about telemetry: KIP-714 pushes are on by default (enable.metrics.push=true).
 * client.id is the pod's name; SIGTERM closes the client (a shutdown hook), which sends its terminating push.
 *
 * <p>The consumer is a consume-and-forward stage, as many applications are: it writes a receipt of each record it
 * read to {@code <topic>.receipts} (auto-created) with a producer of its own, so its pod pushes the Java producer's
 * metrics too (record send, error and retry rates: librdkafka sends none of these) beside the consumer's.
 *
 * <p>Arguments: producer|consumer, bootstrap servers, topic, client.id, rate per second (producer) or group (consumer).
 */
public final class Client {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        props.put("client.id", args[3]);
        CountDownLatch closed = new CountDownLatch(1);
        System.out.println(args[0] + " " + args[3] + " -> " + args[1] + " " + args[2]);
        if (args[0].equals("producer")) {
            props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            long pauseMs = Math.max(1L, (long) (1000.0 / Double.parseDouble(args[4])));
            KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props);
            Thread main = Thread.currentThread();
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                main.interrupt();
                awaitQuietly(closed);
            }));
            try {
                while (!Thread.currentThread().isInterrupted()) {
                    producer.send(new ProducerRecord<>(args[2], args[3].getBytes()));
                    Thread.sleep(pauseMs);  // paces the producer; interrupted on SIGTERM
                }
            } catch (InterruptedException stopping) {
                // SIGTERM: close below
            } finally {
                producer.close(Duration.ofSeconds(5));
                closed.countDown();
            }
        } else {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, args[4]);
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest");
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
            Properties forwarding = new Properties();
            forwarding.put("bootstrap.servers", args[1]);
            forwarding.put("client.id", args[3]);
            forwarding.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            forwarding.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            KafkaProducer<byte[], byte[]> receipts = new KafkaProducer<>(forwarding);
            String receiptsTopic = args[2] + ".receipts";
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                consumer.wakeup();
                awaitQuietly(closed);
            }));
            try {
                consumer.subscribe(List.of(args[2]));
                while (true) {
                    for (ConsumerRecord<byte[], byte[]> read : consumer.poll(Duration.ofMillis(500))) {
                        receipts.send(new ProducerRecord<>(receiptsTopic, read.key(),
                            (read.topic() + "/" + read.partition() + "@" + read.offset()).getBytes()));
                    }
                }
            } catch (WakeupException stopping) {
                // SIGTERM: close below
            } finally {
                receipts.close(Duration.ofSeconds(5));
                consumer.close(Duration.ofSeconds(5));
                closed.countDown();
            }
        }
    }

    private static void awaitQuietly(CountDownLatch latch) {
        try {
            latch.await();
        } catch (InterruptedException ignored) {
            Thread.currentThread().interrupt();
        }
    }
}
