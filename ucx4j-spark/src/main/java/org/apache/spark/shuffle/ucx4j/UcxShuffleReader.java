package org.apache.spark.shuffle.ucx4j;

import java.io.InputStream;

import org.apache.spark.Aggregator;
import org.apache.spark.InterruptibleIterator;
import org.apache.spark.MapOutputTracker;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.internal.config.ConfigEntry;
import org.apache.spark.internal.config.package$;
import org.apache.spark.io.CompressionCodec$;
import org.apache.spark.serializer.DeserializationStream;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.apache.spark.shuffle.BaseShuffleHandle;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.shuffle.checksum.RowBasedChecksum;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManager;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockFetcherIterator;
import org.apache.spark.util.SystemClock;
import org.apache.spark.util.collection.ExternalSorter;

import scala.Option;
import scala.Product2;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.collection.Seq;

/**
 * Reads one reduce task's input: Spark's own {@link ShuffleBlockFetcherIterator} (flow control, local blocks,
 * corruption detection, fetch metrics, {@code FetchFailedException}) with ucx4j as its block client, then the same
 * deserialization, aggregation and sorting as Spark's built-in reader.
 */
@SuppressWarnings({"rawtypes", "unchecked"})
final class UcxShuffleReader<K, C> implements ShuffleReader<K, C> {
    private final BaseShuffleHandle<K, ?, C> handle;
    private final Iterator<Tuple2<BlockManagerId, Seq<Tuple3<BlockId, Object, Object>>>> blocksByAddress;
    private final TaskContext context;
    private final ShuffleReadMetricsReporter readMetrics;
    private final UcxBlockClient client;
    private final boolean shouldBatchFetch;

    UcxShuffleReader(BaseShuffleHandle<K, ?, C> handle,
            Iterator<Tuple2<BlockManagerId, Seq<Tuple3<BlockId, Object, Object>>>> blocksByAddress,
            TaskContext context, ShuffleReadMetricsReporter readMetrics, UcxBlockClient client,
            boolean shouldBatchFetch) {
        this.handle = handle;
        this.blocksByAddress = blocksByAddress;
        this.context = context;
        this.readMetrics = readMetrics;
        this.client = client;
        this.shouldBatchFetch = shouldBatchFetch;
    }

    private static <T> T get(ConfigEntry<T> entry) {
        return SparkEnv.get().conf().get(entry);
    }

    /** Same rule as Spark's reader: batch-fetch adjacent blocks only where the bytes can be concatenated. */
    private boolean fetchContinuousBlocksInBatch() {
        ShuffleDependency<K, ?, C> dep = handle.dependency();
        SparkConf conf = SparkEnv.get().conf();
        package$ c = package$.MODULE$;
        boolean compressed = (Boolean) get(c.SHUFFLE_COMPRESS());
        boolean codecConcatenation = !compressed || CompressionCodec$.MODULE$.supportsConcatenationOfSerializedStreams(
                CompressionCodec$.MODULE$.createCodec(conf));
        return shouldBatchFetch && dep.serializer().supportsRelocationOfSerializedObjects() && codecConcatenation
                && !(Boolean) get(c.SHUFFLE_USE_OLD_FETCH_PROTOCOL()) && !(Boolean) get(c.IO_ENCRYPTION_ENABLED());
    }

    @Override
    public Iterator<Product2<K, C>> read() {
        SparkEnv env = SparkEnv.get();
        BlockManager blockManager = env.blockManager();
        MapOutputTracker tracker = env.mapOutputTracker();
        SerializerManager serializerManager = env.serializerManager();
        package$ c = package$.MODULE$;
        ShuffleBlockFetcherIterator fetcher = new ShuffleBlockFetcherIterator(context, client, blockManager, tracker,
                (Iterator) blocksByAddress,
                (scala.Function2<BlockId, InputStream, InputStream>) serializerManager::wrapStream,
                (Long) get(c.REDUCER_MAX_SIZE_IN_FLIGHT()) * 1024 * 1024,
                (Integer) get(c.REDUCER_MAX_REQS_IN_FLIGHT()),
                (Integer) get(c.REDUCER_MAX_BLOCKS_IN_FLIGHT_PER_ADDRESS()),
                (Long) get(c.MAX_REMOTE_BLOCK_SIZE_FETCH_TO_MEM()),
                (Integer) get(c.SHUFFLE_MAX_ATTEMPTS_ON_NETTY_OOM()),
                (Boolean) get(c.SHUFFLE_DETECT_CORRUPT()),
                (Boolean) get(c.SHUFFLE_DETECT_CORRUPT_MEMORY()),
                (Boolean) get(c.SHUFFLE_CHECKSUM_ENABLED()),
                (String) get(c.SHUFFLE_CHECKSUM_ALGORITHM()),
                readMetrics,
                fetchContinuousBlocksInBatch(),
                new SystemClock());

        ShuffleDependency<K, ?, C> dep = handle.dependency();
        Iterator records = new InterruptibleIterator(context, new Records(fetcher.toCompletionIterator(), dep.serializer().newInstance()));

        Iterator<Product2<K, C>> result;
        if (dep.keyOrdering().isDefined()) {
            Option ordering = dep.keyOrdering();
            ExternalSorter sorter;
            if (dep.aggregator().isDefined()) {
                Option aggregator = dep.aggregator();
                if (dep.mapSideCombine()) {
                    Aggregator a = (Aggregator) aggregator.get();
                    aggregator = Option.apply(new Aggregator((scala.Function1) x -> x, a.mergeCombiners(),
                            a.mergeCombiners()));
                }
                sorter = new ExternalSorter(context, aggregator, Option.empty(), ordering, dep.serializer(),
                        new RowBasedChecksum[0]);
            } else {
                sorter = new ExternalSorter(context, Option.empty(), Option.empty(), ordering, dep.serializer(),
                        new RowBasedChecksum[0]);
            }
            result = sorter.insertAllAndUpdateMetrics(records);
        } else if (dep.aggregator().isDefined()) {
            Aggregator a = dep.aggregator().get();
            result = dep.mapSideCombine() ? a.combineCombinersByKey(records, context)
                    : a.combineValuesByKey(records, context);
        } else {
            result = records;
        }
        return result instanceof InterruptibleIterator ? result : new InterruptibleIterator(context, result);
    }

    /**
     * Every record of every fetched block, counted into the read metrics; once all are read, the task's shuffle
     * read metrics are merged as in Spark's reader (the fetcher cleans itself up when exhausted).
     */
    private final class Records extends AbstractIterator<Tuple2<Object, Object>> {
        private final Iterator<Tuple2<BlockId, InputStream>> blocks;
        private final SerializerInstance serializer;
        private Iterator<Tuple2<Object, Object>> current;
        private boolean completed;

        Records(Iterator<Tuple2<BlockId, InputStream>> blocks, SerializerInstance serializer) {
            this.blocks = blocks;
            this.serializer = serializer;
        }

        @Override
        public boolean hasNext() {
            while (current == null || !current.hasNext()) {
                if (!blocks.hasNext()) {
                    if (!completed) {
                        completed = true;
                        context.taskMetrics().mergeShuffleReadMetrics();
                    }
                    return false;
                }
                Tuple2<BlockId, InputStream> block = blocks.next();
                DeserializationStream in = serializer.deserializeStream(block._2());
                current = in.asKeyValueIterator();
            }
            return true;
        }

        @Override
        public Tuple2<Object, Object> next() {
            if (!hasNext()) {
                throw new java.util.NoSuchElementException();
            }
            readMetrics.incRecordsRead(1);
            return current.next();
        }
    }
}
