"""The side-by-side's windowed word count in PyFlink 2.3's DataStream API (run by ``run.py``).

Per word, how often it came in each 5-second tumbling window of event time; event
time is the word's position in the stream / 100. Reads the stream from a file, one
word a line; prints ``word start count`` per window. Usage, in the PyFlink
virtualenv: ``python pyflink_windowcount.py`` with ``WORDS_FILE`` set.
"""

import os

from pyflink.common import Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import ProcessWindowFunction
from pyflink.datastream.window import TumblingEventTimeWindows


class PositionTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[0] * 10  # milliseconds: position / 100 seconds


class CountWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield f"{key} {context.window().start / 1000:g} {sum(1 for _ in elements)}"


with open(os.environ["WORDS_FILE"]) as f:
    words = list(enumerate(f.read().split()))

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
stream = env.from_collection(words, Types.TUPLE([Types.INT(), Types.STRING()]))
timed = stream.assign_timestamps_and_watermarks(
    WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(PositionTime())
)
counts = (
    timed.key_by(lambda pw: pw[1], key_type=Types.STRING())
    .window(TumblingEventTimeWindows.of(Time.seconds(5)))
    .process(CountWindow(), Types.STRING())
)
counts.print()
env.execute("windowcount")
