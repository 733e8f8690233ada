"""The side-by-side's windowed word count in PyFlink 2.3's Table API (run by ``run.py``).

The same job as ``pyflink_windowcount.py`` as one SQL query over a view of the stream
with an event-time column and its watermark; prints Flink's result table (a row per
window: word, start in seconds, count). Usage, in the PyFlink virtualenv:
``python pyflink_table_windowcount.py`` with ``WORDS_FILE`` set.
"""

import os

from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import Schema, StreamTableEnvironment

with open(os.environ["WORDS_FILE"]) as f:
    words = [Row(p, w) for p, w in enumerate(f.read().split())]

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
t_env = StreamTableEnvironment.create(env)
t_env.get_config().set("table.local-time-zone", "UTC")
stream = env.from_collection(words, Types.ROW_NAMED(["pos", "word"], [Types.INT(), Types.STRING()]))
schema = (
    Schema.new_builder()
    .column("pos", "INT")
    .column("word", "STRING")
    .column_by_expression("ts", "TO_TIMESTAMP_LTZ(pos * 10, 3)")
    .watermark("ts", "ts")
    .build()
)
t_env.create_temporary_view("words", stream, schema)
t_env.execute_sql("""
    SELECT word, UNIX_TIMESTAMP(CAST(window_start AS STRING)) AS w_start, COUNT(*) AS n
    FROM TABLE(TUMBLE(TABLE words, DESCRIPTOR(ts), INTERVAL '5' SECOND))
    GROUP BY word, window_start, window_end
""").print()
