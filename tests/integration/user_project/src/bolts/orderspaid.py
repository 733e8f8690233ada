from spouts.shop import PAY_AFTER, RATE

from elastorm import KeyedBolt, MapState, TumblingWindow, ValueState, WindowState, output_id_fields

DEADLINE = 5  # seconds of event time an order waits for its payment
IDLE = 10  # seconds of wall clock without a customer's events: report its open windows


def add(totals, event):
    """One event into a window's [orders, ordered, paid]."""
    orders, ordered, paid = totals
    kind, amount = event
    if kind == "order":
        return [orders + 1, ordered + amount, paid]
    return [orders, ordered, paid + amount]


class OrdersPaid(KeyedBolt):
    """Joins each customer's orders and payments: per 10-second window of event time,
    how many orders, their sum and what was paid; an "unpaid" row for an order whose
    payment did not come within DEADLINE; "open" rows for the windows still open once
    the customer has been quiet for IDLE seconds of wall clock."""

    outputs = output_id_fields(["customer", "what", "start", "orders", "ordered", "paid"])
    per_window = WindowState(TumblingWindow(10), add, initial=[0, 0, 0])
    waiting = MapState()  # order number -> [amount, deadline]
    quiet_at = ValueState()  # when the customer's processing-time timer is set

    def event_time(self, key, values):
        order, kind = values[0], values[1]
        return order / RATE + (PAY_AFTER if kind == "payment" else 0)

    def process_keyed(self, key, values):
        order, kind, _, amount = values
        self.per_window.add([kind, amount])
        if kind == "order":
            deadline = self.timers.now + DEADLINE
            self.waiting.put(str(order), [amount, deadline])
            self.timers.register_event_time(deadline)
        elif amount > 0 and self.waiting.contains(str(order)):
            _, deadline = self.waiting.get(str(order))
            self.waiting.remove(str(order))
            self.timers.delete_event_time(deadline)
        if self.quiet_at.value() is not None:
            self.timers.delete_processing_time(self.quiet_at.value())
        self.quiet_at.update(self.timers.processing_time() + IDLE)
        self.timers.register_processing_time(self.quiet_at.value())

    def on_window(self, key, window, totals):
        self.emit([key, "window", window.start, *totals])

    def on_timer(self, key, time):
        if self.timers.domain == "processing":  # quiet for IDLE seconds
            self.quiet_at.clear()
            for window, totals in self.per_window.windows():
                self.emit([key, "open", window.start, *totals])
            return
        for order, (amount, deadline) in self.waiting.items():
            if deadline <= time:  # the watermark passed it: its payment is not coming
                self.waiting.remove(order)
                self.emit([key, "unpaid", deadline - DEADLINE, 1, amount, 0])
