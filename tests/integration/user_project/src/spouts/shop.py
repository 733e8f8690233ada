from elastorm import GeneratedSpout

CUSTOMERS = ["ada", "bob", "cy", "dee", "eve"]
ORDERS = 1500  # 30 seconds of event time
RATE = 50  # tuples a second, and order numbers to a second of event time
PAY_AFTER = 2  # seconds of event time from an order to its payment


def customer(order):
    return CUSTOMERS[order % len(CUSTOMERS)]


def amount(order):
    return 5 + order * 13 % 40


def paid(order):
    """What the payment of an order pays: every 9th is declined (0)."""
    return 0 if order % 9 == 4 else amount(order)


class Orders(GeneratedSpout):
    """Order number `position`, at event time position / RATE: [position, "order",
    customer, amount]. The same every time, so elastorm can replay it."""

    fields = ["kind", "customer", "amount"]
    rate = RATE

    def generate(self, position):
        if position >= ORDERS:
            return None
        return ["order", customer(position), amount(position)]


class Payments(GeneratedSpout):
    """The payment of order `position`, PAY_AFTER seconds of event time after it:
    [position, "payment", customer, paid]."""

    fields = ["kind", "customer", "amount"]
    rate = RATE

    def generate(self, position):
        if position >= ORDERS:
            return None
        return ["payment", customer(position), paid(position)]
