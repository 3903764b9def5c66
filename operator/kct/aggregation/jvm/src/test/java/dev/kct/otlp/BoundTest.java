package dev.kct.otlp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import org.junit.jupiter.api.Test;

/** A micro-batch's time bound as a UDF: its value, also after Spark ships it to an executor (serialized). */
class BoundTest {
  @Test
  void itAnswersItsValueAlsoAfterSerialization() throws IOException, ClassNotFoundException {
    Bound bound = new Bound(1_700_000_000_000_000_000L);
    assertEquals(1_700_000_000_000_000_000L, bound.call());
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(bound);
    }
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
      assertEquals(1_700_000_000_000_000_000L, ((Bound) in.readObject()).call());
    }
  }
}
