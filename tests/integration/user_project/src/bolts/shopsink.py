from elastorm import Sink


class ShopSink(Sink):
    """Each output of orders_paid once into the table shop."""

    schema = (
        "CREATE TABLE IF NOT EXISTS shop (customer TEXT, what TEXT, start REAL,"
        " orders INTEGER, ordered INTEGER, paid INTEGER, kind TEXT)"
    )
    table = "shop"
    columns = ("customer", "what", "start", "orders", "ordered", "paid")
