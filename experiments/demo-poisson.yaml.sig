{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJhNmE5NDVjODg0NGE0NjViNWJhYzhkNzE1NWE5NTY2YmZkN2FlNGM3MGFhMDg4NTE4ZDExNGU5ZjhiMzVkZDZlIn0sIm5hbWUiOiJkZW1vLXBvaXNzb24ueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "4eLxq5fFEfGa6JtwYqVJy5TTdJW7qBSK7v+IBKFJZsNWJ8F/DY2FkKbNNbm595LmDVwOQd3JJShbu8+pXalYDQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
