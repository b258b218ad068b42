-- A small online shop: customers, products, orders and the items in each order.
-- NULLs carry meaning: a customer with no email address on file.
CREATE TABLE customer (
  customer_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  email TEXT                 -- NULL when not given
);

CREATE TABLE product (
  product_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  category TEXT NOT NULL,
  price REAL NOT NULL        -- in euros, in steps of 0.5
);

CREATE TABLE orders (
  order_id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customer (customer_id),
  order_date TEXT NOT NULL,  -- YYYY-MM-DD
  status TEXT NOT NULL       -- 'shipped', 'pending' or 'cancelled'
);

CREATE TABLE order_item (
  order_id INTEGER NOT NULL REFERENCES orders (order_id),
  product_id INTEGER NOT NULL REFERENCES product (product_id),
  quantity INTEGER NOT NULL,
  PRIMARY KEY (order_id, product_id)
);

INSERT INTO customer VALUES
  (1, 'Alice Martin', 'Lyon', 'alice@example.com'),
  (2, 'Bruno Costa', 'Porto', NULL),
  (3, 'Chloe Dubois', 'Lyon', 'chloe@example.com'),
  (4, 'Dmitri Ivanov', 'Riga', 'dmitri@example.com'),
  (5, 'Elena Rossi', 'Porto', NULL),
  (6, 'Felix Wagner', 'Lyon', 'felix@example.com'),
  (7, 'Greta Nilsen', 'Oslo', NULL),
  (8, 'Hugo Lambert', 'Riga', 'hugo@example.com');

INSERT INTO product VALUES
  (1, 'Espresso Machine', 'kitchen', 189.0),
  (2, 'Chef Knife', 'kitchen', 45.5),
  (3, 'Cast Iron Pan', 'kitchen', 39.5),
  (4, 'Reading Lamp', 'home', 29.0),
  (5, 'Wool Blanket', 'home', 64.0),
  (6, 'Desk Organizer', 'office', 12.5),
  (7, 'Fountain Pen', 'office', 24.0),
  (8, 'Notebook Set', 'office', 9.5),
  (9, 'Travel Mug', 'kitchen', 15.0),
  (10, 'Floor Cushion', 'home', 35.0);

INSERT INTO orders VALUES
  (1, 1, '2024-01-05', 'shipped'),
  (2, 2, '2024-01-17', 'shipped'),
  (3, 1, '2024-02-02', 'cancelled'),
  (4, 3, '2024-02-20', 'shipped'),
  (5, 4, '2024-03-03', 'shipped'),
  (6, 5, '2024-03-11', 'pending'),
  (7, 3, '2024-03-28', 'cancelled'),
  (8, 6, '2024-04-06', 'shipped'),
  (9, 2, '2024-04-19', 'pending'),
  (10, 1, '2024-05-01', 'shipped');

INSERT INTO order_item VALUES
  (1, 1, 1), (1, 9, 3),
  (2, 6, 3), (2, 8, 5),
  (3, 5, 1),
  (4, 2, 1), (4, 3, 1), (4, 9, 1),
  (5, 7, 2), (5, 8, 4),
  (6, 4, 2),
  (7, 10, 1), (7, 4, 1),
  (8, 5, 2), (8, 8, 3),
  (9, 1, 1),
  (10, 7, 1), (10, 6, 2);
