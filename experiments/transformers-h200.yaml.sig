{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI2YWNmNTY1YWJkMTNkNzdlMjAxNGQxZmRhOGQ1MTQ0ZTI0N2Y0NTkyMGY2ZTM3ZmM2YzgxNjNhNzExYjY1MTk0In0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC55YW1sIn1dfQ==",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "GDJ1fXH9SOS8jzeeg70gE34F+YqXCEL6HmEBpqbY/sLvPzf/0rKbhSKkjzR3EuX816BJ2DjPyQfM4K/+GcRjAA==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
