import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A Java client for tests/e2e/test_plugin_versions_e2e.py and test_client_matrix_e2e.py: produces a message every
 * 100 ms until the stop file exists (or 90 s passed), waits until every record is acknowledged, then closes. It sets
 * nothing about telemetry: KIP-714 pushes are on by default (enable.metrics.push=true), so what the broker's plugin
 * receives is what any Java producer sends.
 *
 * <p>With a close file, it writes "&lt;stop file&gt;.flushed" once every record is acknowledged and stays open until
 * the close file exists (or 60 s passed): its terminating push is best effort (sent only if the producer's I/O
 * thread runs once more while closing), so a test that compares the records it counted with those it produced
 * waits for a regular push after the flush instead.
 *
 * <p>Arguments: bootstrap servers, topic, client.id, stop file [, close file].
 */
public final class TelemetryProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, args[2]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        Path stop = Path.of(args[3]);
        long deadline = System.nanoTime() + 90_000_000_000L;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            while (!Files.exists(stop) && System.nanoTime() < deadline) {
                producer.send(new ProducerRecord<>(args[1], new byte[] {1}));
                Thread.sleep(100);
            }
            producer.flush();
            if (args.length > 4) {
                Files.writeString(Path.of(args[3] + ".flushed"), "flushed\n");
                Path close = Path.of(args[4]);
                long closeDeadline = System.nanoTime() + 60_000_000_000L;
                while (!Files.exists(close) && System.nanoTime() < closeDeadline) {
                    Thread.sleep(100);
                }
            }
        }
    }
}
