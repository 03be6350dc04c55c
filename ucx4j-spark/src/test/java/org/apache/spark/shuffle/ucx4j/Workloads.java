package org.apache.spark.shuffle.ucx4j;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import java.util.zip.CRC32;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

import scala.Tuple2;

/** The jobs run with and without the plug-in; each result is a list of strings in a defined order. */
final class Workloads {
    private Workloads() {
    }

    static Map<String, List<String>> run(SparkSession spark) {
        JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
        List<Integer> numbers = IntStream.range(0, 200_000).boxed().toList();
        JavaRDD<Integer> rdd = sc.parallelize(numbers, 8);
        Map<String, List<String>> out = new LinkedHashMap<>();

        out.put("reduceByKey", sorted(rdd.mapToPair(i -> new Tuple2<>(i % 1000, (long) i))
                .reduceByKey(Long::sum, 6).map(t -> t._1() + "=" + t._2()).collect()));

        out.put("groupByKey", sorted(rdd.mapToPair(i -> new Tuple2<>(i % 577, i)).groupByKey(5).map(t -> {
            long n = 0;
            long sum = 0;
            for (int v : t._2()) {
                n++;
                sum += v;
            }
            return t._1() + ":" + n + ":" + sum;
        }).collect()));

        // sortBy keeps its global order: compare as collected
        out.put("sortBy", rdd.map(i -> (int) ((i * 2654435761L) % 1_000_003)).sortBy(x -> x, true, 7)
                .map(String::valueOf).collect());

        out.put("repartition", sorted(rdd.map(i -> "v" + i).repartition(5)
                .mapPartitionsWithIndex((p, it) -> {
                    long n = 0;
                    CRC32 crc = new CRC32();
                    List<String> values = new ArrayList<>();
                    it.forEachRemaining(values::add);
                    values.sort(null);
                    for (String v : values) {
                        crc.update(v.getBytes());
                        n++;
                    }
                    return List.of(p + ":" + n + ":" + crc.getValue()).iterator();
                }, true).collect()));

        Dataset<Row> left = spark.range(0, 300_000, 1, 6).selectExpr("id", "id % 97 as a");
        Dataset<Row> right = spark.range(0, 300_000, 3, 4).selectExpr("id", "concat('r', id) as b");
        Dataset<Row> joined = left.join(right, "id").selectExpr("id", "a", "b");
        out.put("dataframeJoin", joined.orderBy("id").collectAsList().stream().map(Row::toString).toList());
        out.put("dataframeAgg", joined.groupBy("a").count().orderBy("a").collectAsList().stream()
                .map(Row::toString).toList());
        return out;
    }

    private static List<String> sorted(List<String> in) {
        List<String> l = new ArrayList<>(in);
        l.sort(null);
        return l;
    }
}
